"""Test shim: torch answers as on an Apple-silicon Mac (MPS present, no CUDA); its kernels
still run on the CPU. See pretend_cuda."""

import torch

torch.backends.mps.is_available = lambda: True
if hasattr(torch, "accelerator"):
    torch.accelerator.is_available = lambda: True
    torch.accelerator.device_count = lambda: 1
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("mps")
