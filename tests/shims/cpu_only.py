"""Test shim: a machine without accelerators, whatever this one has. The default suite asserts
what a CPU-only machine prints; with this, it passes on a machine with CUDA GPUs or Apple's MPS
too. Every subprocess a test starts gets it (conftest.clean_env), and conftest's autouse
fixture applies the same ``hide_accelerators`` to the tests' own process."""

import os
from collections.abc import Callable
from typing import Any

from answers import answering


def hide_accelerators(set_attribute: Callable[[Any, str, Any], None] = setattr) -> None:
    """Every query a script asks about accelerators answers 'none'. ``set_attribute``:
    setattr, or pytest's monkeypatch.setattr (undone after the test)."""
    import torch
    answers = [(torch.cuda, "is_available", False), (torch.cuda, "device_count", 0),
               (torch.backends.mps, "is_available", False)]
    if hasattr(torch, "accelerator"):  # torch 2.6+
        answers += [(torch.accelerator, "is_available", False),
                    (torch.accelerator, "device_count", 0),
                    (torch.accelerator, "current_accelerator", None)]
    for module, name, value in answers:
        set_attribute(module, name, answering(getattr(module, name), value))


if __name__ == "cpu_only":  # imported as a shim, not by conftest
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CUDA hidden from the driver on, where it is
    hide_accelerators()
