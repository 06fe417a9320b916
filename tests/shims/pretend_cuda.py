"""Test shim: torch answers as a CUDA build on a machine with one CUDA GPU (its kernels still
run on the CPU, so anything that really moves a tensor to CUDA fails). For the test that runs
the default suite's device-dependent tests as on such a machine: they must pin the CPU, or fail
here."""

import torch
from answers import answering

torch.cuda.is_available = answering(torch.cuda.is_available, True)
torch.cuda.device_count = answering(torch.cuda.device_count, 1)
torch.cuda.get_device_name = answering(torch.cuda.get_device_name, "Simulated GPU")
torch.cuda.get_device_capability = answering(torch.cuda.get_device_capability, (8, 0))
torch.cuda.get_arch_list = answering(torch.cuda.get_arch_list, ["sm_80", "sm_90"])
torch.version.cuda = "12.6"  # as a CUDA build answers
if hasattr(torch, "accelerator"):
    torch.accelerator.is_available = answering(torch.accelerator.is_available, True)
    torch.accelerator.device_count = answering(torch.accelerator.device_count, 1)
    torch.accelerator.current_accelerator = answering(torch.accelerator.current_accelerator,
                                                      torch.device("cuda"))
