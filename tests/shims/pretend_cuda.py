"""Test shim: CUDA that works, on this CPU build. torch answers as a CUDA build on a machine with
one NVIDIA H100 (the name and capability the stress test's nvidia-smi gives), and what is asked
onto CUDA stays on the CPU, as the GPU would take it: a TorchFunctionMode turns every "cuda"
device handed to a torch function or Tensor method (``.to``, ``.cuda()``, ``device=``) into the
CPU, and torch.cuda's calls that would need the driver answer as on a GPU that is idle. A test
that passes only because this torch has no CUDA (a move to CUDA that raises) fails under it,
as on a machine where CUDA works (test_machines.py's stress test runs the default suite so)."""

from types import SimpleNamespace

import torch
from answers import answering
from torch.overrides import TorchFunctionMode

NAME, CAPABILITY = "NVIDIA H100 80GB HBM3", (9, 0)


def _on_the_cpu(value):
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    return value


class _CudaOnTheCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.device:  # a device named stays named: what is put on it moves
            return func(*args, **(kwargs or {}))
        args = tuple(_on_the_cpu(value) for value in args)
        kwargs = {name: _on_the_cpu(value) for name, value in (kwargs or {}).items()}
        return func(*args, **kwargs)


_properties = SimpleNamespace(name=NAME, major=CAPABILITY[0], minor=CAPABILITY[1],
                              total_memory=80 * 2**30, multi_processor_count=132, gcnArchName="")
for _name, _value in {
        "is_available": True, "device_count": 1, "get_device_name": NAME,
        "get_device_capability": CAPABILITY, "get_device_properties": _properties,
        "get_arch_list": ["sm_80", "sm_90"], "current_device": 0, "is_initialized": True,
        "is_bf16_supported": True, "init": None, "synchronize": None, "set_device": None,
        "empty_cache": None, "reset_peak_memory_stats": None, "max_memory_allocated": 0,
        "memory_allocated": 0}.items():
    setattr(torch.cuda, _name, answering(getattr(torch.cuda, _name), _value))
torch.version.cuda = "12.6"  # as a CUDA build answers
if hasattr(torch, "accelerator"):
    torch.accelerator.is_available = answering(torch.accelerator.is_available, True)
    torch.accelerator.device_count = answering(torch.accelerator.device_count, 1)
    torch.accelerator.current_accelerator = answering(torch.accelerator.current_accelerator,
                                                      torch.device("cuda"))
_CudaOnTheCpu().__enter__()  # for the rest of the process
