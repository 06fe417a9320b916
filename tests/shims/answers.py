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


def lost_peer() -> RuntimeError:
    """gloo's error for a peer that went away, as torch's build for the OS that
    ``platform.system()`` names words it: its source path first, with slashes on Linux (torch
    2.13's wheels), with the build folder and backslashes on Windows (the path as a real
    Windows message has it: ``[enforce fail at C:\\actions-runner\\...\\device.cc:164]``)."""
    import platform
    source = (r"enforce fail at C:\actions-runner\_work\pytorch\pytorch\pytorch\third_party"
              r"\gloo\gloo\transport\uv\pair.cc:333" if platform.system() == "Windows" else
              "../third_party/gloo/gloo/transport/tcp/pair.cc:534")
    return RuntimeError(f"[{source}] Connection closed by peer [127.0.0.1]:29500")


def hide_distributed(monkeypatch) -> None:
    """A torch built without torch.distributed, as AMD's torch for Windows is
    (ROCm/TheRock#1179, #2008): is_available() False, and none of the process-group functions
    (distributed_c10d's) or its errors; undone after the test. torch's own internals keep what
    they imported (a real such build never reaches them)."""
    import inspect
    import warnings

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    with warnings.catch_warnings():  # reduce_op warns when looked at
        warnings.simplefilter("ignore")
        names = [name for name in distributed_c10d.__all__
                 if inspect.isfunction(vars(dist).get(name))]
    for name in [*names, "DistError", "DistBackendError", "DistNetworkError"]:
        monkeypatch.delattr(dist, name)
    monkeypatch.setattr(dist, "is_available", answering(dist.is_available, False))
