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
    """gloo's error for a peer that went away, in the transport that torch's build for the OS
    ``platform.system()`` names uses, its source path first as that build writes it. Linux's
    tcp transport hears the socket close: "Connection closed by peer" (gloo/transport/tcp/
    pair.cc). macOS's and Windows' uv transport closes the pair without a word, so the
    survivor's receive times out after --timeout: gloo/transport/uv/unbound_buffer.cc,
    ``UnboundBuffer::waitRecv``, ``GLOO_ERROR_MSG("Timed out waiting ", timeout.count(), "ms
    for recv operation to complete")``, at line 63 of gloo's main; GLOO_ERROR_MSG puts
    ``[__FILE__:__LINE__] `` first (gloo/common/error.h), with the build folder and
    backslashes on Windows (as ``[enforce fail at C:\\actions-runner\\...]`` messages show)."""
    import platform
    system = platform.system()
    if system not in ("Windows", "Darwin"):
        return RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
                            "closed by peer [127.0.0.1]:29500")
    source = (r"C:\actions-runner\_work\pytorch\pytorch\pytorch\third_party\gloo\gloo\transport"
              r"\uv\unbound_buffer.cc" if system == "Windows" else
              "../third_party/gloo/gloo/transport/uv/unbound_buffer.cc")
    return RuntimeError(f"[{source}:63] Timed out waiting 120000ms for recv operation to "
                        f"complete")


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
