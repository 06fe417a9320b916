"""Choosing the device to train on (our addition to section 9: a --device flag that works
on every machine and says clearly when the asked-for device is not there)."""

from __future__ import annotations

import argparse

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


class DeviceError(Exception):
    """The asked-for device does not exist here; the message says what to do instead."""


def detect_accelerator() -> str | None:
    """The machine's accelerator type ('cuda', 'mps', ...), or None for a CPU-only machine.

    torch.accelerator (2.6+) knows every backend; older torch is asked about CUDA and MPS.
    """
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


def resolve_device(name: str = "auto") -> torch.device:
    """``auto``: the accelerator if there is one (CUDA, then MPS), else the CPU."""
    if name == "auto":
        return torch.device(detect_accelerator() or "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: this machine has no usable CUDA GPU "
                          f"(torch {torch.__version__}); use --device auto or --device cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("--device mps: Apple's MPS backend is not available here "
                          "(it needs an Apple-silicon Mac); use --device auto or --device cpu")
    if name not in DEVICE_CHOICES:
        raise DeviceError(f"--device {name}: unknown; choose one of {', '.join(DEVICE_CHOICES)}")
    return torch.device(name)


def add_device_flag(parser: argparse.ArgumentParser, choices: tuple[str, ...] = DEVICE_CHOICES,
                    help: str = "where to train; auto: CUDA, then MPS, then CPU") -> None:
    parser.add_argument("--device", choices=choices, default="auto",
                        help=f"{help} (default: %(default)s)")


def device_from_flag(parser: argparse.ArgumentParser, name: str) -> torch.device | None:
    """The device that --device names, or None for ``auto`` (the script's own choice, as the
    tutorial writes it); a device this machine lacks is a usage error (exit 2)."""
    if name == "auto":
        return None
    try:
        return resolve_device(name)
    except DeviceError as err:
        parser.error(f"argument {err}")


def demo_device(device: torch.device | None) -> torch.device | None:
    """a07's section 9.1: the device to show tensors on (``--device``, else the accelerator if
    there is one), or None on the CPU, after saying what the text's GPU lines would print."""
    device = device or torch.device(detect_accelerator() or "cpu")
    if device.type != "cpu":
        print(f"Training device: {device}")
        return device
    found = detect_accelerator()
    print(f"Training device: cpu ({'--device cpu' if found else 'no accelerator found'}).")
    print("On a GPU the same addition prints tensor([5., 7., 9.], device='cuda:0'), and\n"
          "adding a CPU tensor to a GPU tensor raises RuntimeError: Expected all tensors\n"
          "to be on the same device. Every tensor in one operation must live on one device.")
    return None
