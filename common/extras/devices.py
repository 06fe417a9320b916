"""The device to train on (our addition to section 9): a07's --device, which says clearly when
the device asked for is not there, a07's section 9.1 on a CPU-only machine, and a08's one
device per process."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from common.extras.install_check import cpu_build_beside_an_nvidia_gpu, gpu_missing_from_the_build
from common.extras.launcher import Launch
from common.extras.old_torch import current_accelerator, torch_older_than

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """a07's --device: a torch.device, or None for ``auto`` (the tutorial's own choice); a
    device this machine lacks is a usage error (exit 2)."""
    parser.add_argument("--device", choices=DEVICE_CHOICES, default=None, action=_ParseDevice,
                        help="where to train; auto: CUDA, then MPS, then CPU (default: auto)")


class _ParseDevice(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, device_from_flag(parser, values))


def device_from_flag(parser: argparse.ArgumentParser, name: str) -> torch.device | None:
    if name == "auto":
        return None
    if name == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device cuda: this machine has no usable CUDA GPU "
                     f"(torch {torch.__version__}); use --device auto or --device cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        parser.error("argument --device mps: Apple's MPS backend is not available here "
                     "(it needs an Apple-silicon Mac); use --device auto or --device cpu")
    return torch.device(name)


def device_to_show(device: torch.device | None) -> torch.device:
    """a07's section 9.1: --device, else the accelerator if there is one, else the CPU."""
    return device or torch.device(current_accelerator() or "cpu")


def show_device(device: torch.device | None) -> torch.device:
    """a07's section 9.1: the device to show, named; on the CPU, what the GPU lines would
    print; on MPS, that its digits differ from the text's."""
    device = device_to_show(device)
    if device.type == "cpu":
        explain_cpu_only(device)
    else:
        print(f"Training device: {device}")
        if note := mps_digits_note(device):
            print(note)
    return device


def explain_cpu_only(device: torch.device) -> None:
    reason = "--device cpu" if current_accelerator() else "no accelerator found"
    print(f"Training device: {device.type} ({reason}).")
    if unseen := cpu_build_beside_an_nvidia_gpu():
        print(f"Note: {unseen}")
    print("On a GPU the same addition prints tensor([5., 7., 9.], device='cuda:0'), and\n"
          "adding a CPU tensor to a GPU tensor raises RuntimeError: Expected all tensors\n"
          "to be on the same device. Every tensor in one operation must live on one device.")


def mps_digits_note(device: torch.device) -> str | None:
    """On MPS the losses differ from the text's and from run to run in the digits
    (rasbt/LLMs-from-scratch#635, #791, #1020): one line saying so, or None."""
    if device.type != "mps":
        return None
    note = ("Note: on MPS the losses may differ from the text's in the digits, and from run to "
            "run; --device cpu reproduces the text's")
    if torch_older_than(2, 9):
        note += f" (torch {torch.__version__} is older than 2.9, which is steadier on MPS)"
    return note


def device_for_process(parser: argparse.ArgumentParser, name: str,
                       launch: Launch) -> torch.device:
    """a08: one GPU per process (LOCAL_RANK picks it), or the CPU; ``auto`` falls back to the
    CPU where there are too few GPUs, or none this torch build can use, and says why where
    there are some."""
    if name == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count()
    shortage = (gpu_shortage(launch.local_world_size, gpus, platform.system())
                or gpu_missing_from_the_build())
    unseen = None if gpus else cpu_build_beside_an_nvidia_gpu()  # a GPU a CPU build cannot see
    if shortage and name == "cuda":
        parser.error(f"argument --device cuda: {unseen or shortage}")
    if shortage:
        if (gpus or unseen) and launch.rank == 0 and not launch.spawn:  # once, not by --spawn's
            print(f"Note: training on the CPU: {unseen or shortage}")  # parent too
        return torch.device("cpu")
    return torch.device("cuda", launch.local_rank)


def gpu_shortage(local_world_size: int, gpu_count: int, system: str) -> str | None:
    """Why this machine cannot give each process its own GPU, or None if it can."""
    if gpu_count == 0:
        return "this machine has no usable CUDA GPU; use --device cpu (or auto)"
    if system == "Windows":  # no NCCL there, and gloo crashes on CUDA tensors from torch 2.8
        return ("on Windows the processes meet through gloo, which cannot carry CUDA tensors "
                "(an access violation from torch 2.8 on, pytorch/pytorch#186535); use "
                "--device cpu (or auto), or WSL2 for NCCL")
    if local_world_size > gpu_count:
        return (f"{local_world_size} processes on this machine but only {gpu_count} GPU(s), "
                f"and NCCL refuses two processes on one GPU; start {gpu_count} "
                f"(--nproc_per_node={gpu_count} or --spawn {gpu_count}), or use --device cpu")
    return None
