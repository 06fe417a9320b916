"""What older torch releases lack, asked here and nowhere else. The oldest torch the scripts run
on is 2.2.2, the last for Intel Macs (pyproject's markers); elsewhere they ask for 2.4+."""

from __future__ import annotations

import inspect
import os

import torch
import torch.distributed as dist


def torch_older_than(major: int, minor: int) -> bool:
    """This torch's release is older than major.minor (local suffixes such as +cpu ignored)."""
    release = torch.__version__.split("+")[0].split(".")
    return (int(release[0]), int(release[1])) < (major, minor)


def current_accelerator() -> str | None:
    """'cuda', 'mps', ... or None on a CPU-only machine: torch.accelerator (2.6+) knows every
    backend; older torch is asked about CUDA and MPS."""
    accelerator_api = getattr(torch, "accelerator", None)
    if accelerator_api is not None and hasattr(accelerator_api, "current_accelerator"):
        if not accelerator_api.is_available():  # before 2.7, current_accelerator() may not be None
            return None
        return accelerator_api.current_accelerator().type
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return None


def autocast_available(device_type: str) -> bool:
    """Whether this torch has autocast for ``device_type`` (none for MPS before 2.5); torch
    before 2.4 cannot say, and is taken at its word when autocast is built."""
    is_available = getattr(torch.amp, "is_autocast_available", None)
    return is_available is None or is_available(device_type)


def device_id(device: torch.device) -> dict[str, torch.device]:
    """``init_process_group``'s ``device_id=`` for a CUDA device (torch 2.3+: NCCL knows its
    GPU up front; 2.8 to 2.14 warn without it), as keyword arguments; none elsewhere."""
    if device.type != "cuda" or "device_id" not in inspect.signature(
            dist.init_process_group).parameters:
        return {}
    return {"device_id": device}


def store_uses_libuv() -> bool:
    """Whether a08's TCPStore asks for libuv: torch's default from 2.4, unless USE_LIBUV=0 (as on
    Windows); not before 2.4, whose server aborts on a port in use (torch 2.2.2, measured)."""
    return os.environ.get("USE_LIBUV", "1") != "0" and not torch_older_than(2, 4)
