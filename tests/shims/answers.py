"""For the shims: a torch query replaced by one with a fixed answer, which keeps the original's
name and attributes (torch 2.15's dynamo reads ``torch.backends.mps.is_available.__wrapped__``
as it loads: a bare lambda there breaks every script that imports it)."""

import functools
from collections.abc import Callable
from typing import Any


def answering(original: Callable, value: Any) -> Callable:
    @functools.wraps(original)
    def answer(*args: Any, **kwargs: Any) -> Any:
        return value
    return answer


def hide_accelerators(set_attribute: Callable[[Any, str, Any], None] = setattr) -> None:
    """Every query a script asks about accelerators answers 'none' (shims/cpu_only).
    ``set_attribute``: setattr, or pytest's monkeypatch.setattr (undone after the test)."""
    import torch
    answers = [(torch.cuda, "is_available", False), (torch.cuda, "device_count", 0),
               (torch.backends.mps, "is_available", False)]
    if hasattr(torch, "accelerator"):  # torch 2.6+
        answers += [(torch.accelerator, "is_available", False),
                    (torch.accelerator, "device_count", 0),
                    (torch.accelerator, "current_accelerator", None)]
    for module, name, value in answers:
        set_attribute(module, name, answering(getattr(module, name), value))
