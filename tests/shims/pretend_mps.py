"""Test shim: torch answers as on an Apple-silicon Mac (MPS present, no CUDA); its kernels
still run on the CPU. See pretend_cuda."""

import torch
from answers import answering

torch.backends.mps.is_available = answering(torch.backends.mps.is_available, True)
if hasattr(torch, "accelerator"):
    torch.accelerator.is_available = answering(torch.accelerator.is_available, True)
    torch.accelerator.device_count = answering(torch.accelerator.device_count, 1)
    torch.accelerator.current_accelerator = answering(torch.accelerator.current_accelerator,
                                                      torch.device("mps"))
