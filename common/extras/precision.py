"""a07's and a08's ``--amp``: autocast around the tutorial's forward pass, in a precision this
torch can compute on the device (the GPU articles' parts on precision use it too)."""

from __future__ import annotations

import argparse
import contextlib
import warnings

from common.extras.old_torch import autocast_available

import torch

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def add_amp_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--amp", choices=tuple(AMP_DTYPES), default=None,
                        help="train under autocast in bfloat16 (CPUs, CUDA GPUs, Apple MPS "
                             "with torch 2.6+ on macOS 14+) or float16 (GPUs) "
                             "(default: off, float32 as in the tutorial)")


def check_amp(parser: argparse.ArgumentParser, amp: str | None, device_type: str) -> None:
    """--amp that this torch cannot run on this device: one usage line, before any work."""
    if amp is not None and (problem := amp_problem(AMP_DTYPES[amp], device_type)):
        parser.error(f"argument --amp {amp}: {problem}")


def amp_problem(dtype: torch.dtype, device_type: str) -> str | None:
    """Why autocast in ``dtype`` cannot run on ``device_type`` with this torch, or None. float16
    is for GPUs; otherwise torch is asked: it has no MPS autocast before 2.5, and where a dtype
    is unsupported (bfloat16 on MPS before torch 2.6 or macOS 14) it warns and computes in
    float32, so a run would be labelled with a precision it never used."""
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.float16 and device_type == "cpu":
        return "float16 autocast is for GPUs (CUDA, or MPS with torch 2.5+); on the CPU use bf16"
    if not autocast_available(device_type):
        return f"torch {torch.__version__} has no autocast on {device_type}"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            enabled = torch.autocast(device_type=device_type, dtype=dtype)._enabled
        except (RuntimeError, AssertionError) as err:
            return f"{name} autocast on {device_type}: {str(err).splitlines()[0]}"
    if not enabled:
        reason = str(warned[0].message).splitlines()[0] if warned else "disabled by torch"
        return f"{name} autocast on {device_type} with torch {torch.__version__}: {reason}"
    return None


def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` in the --amp precision (the guide's ``torch.cuda.amp.autocast`` is
    deprecated), or nothing. a07 and a08 keep the text's backward and step, so fp16 trains
    without a GradScaler: this small model's gradients stay far inside float16's range
    (``gpu_articles.train_in_precision`` shows the scaler)."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp])
