"""Test shim: torch answers as on a machine with one CUDA GPU (its kernels still run on the
CPU, so anything that really moves a tensor to CUDA fails). For the test that runs the default
suite's device-dependent tests as on such a machine: they must pin the CPU, or fail here."""

import torch

torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_name = lambda device=None: "Simulated GPU"
torch.cuda.get_device_capability = lambda device=None: (8, 0)
if hasattr(torch, "accelerator"):
    torch.accelerator.is_available = lambda: True
    torch.accelerator.device_count = lambda: 1
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("cuda")
