"""Mixed precision and memory, for a07 and a08 ``--amp`` and the GPU guide's parts on them:
autocast around the tutorial's forward pass, and what one training step keeps in memory with
and without gradient checkpointing."""

from __future__ import annotations

import argparse
import contextlib
import warnings
from collections.abc import Callable
from typing import Any

from common import NeuralNetwork, compute_accuracy, toy_loaders
from common.extras.old_torch import autocast_available

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

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
    """Why training under autocast in ``dtype`` cannot run on ``device_type`` with this torch,
    or None where it can. float16 is for GPUs (a CPU has no fast float16 path). Otherwise torch
    itself is asked: it has no autocast at all for MPS before 2.5, and where a dtype is not
    supported (bfloat16 on MPS before torch 2.6 or macOS 14) it warns and quietly computes in
    float32 instead, so a run would be labelled with a precision it never used."""
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
    """``torch.autocast`` in the --amp precision on the device's type, or nothing without
    --amp. (``torch.cuda.amp.autocast``, which the GPU guide names, is deprecated for this.)
    a07 and a08 keep the tutorial's own backward and step lines, so --amp fp16 trains without
    a GradScaler: this small model's gradients stay far inside float16's range. The GPU guide's
    part on mixed precision shows the scaler (``train_in_precision``)."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp])


class Blocks(nn.Module):
    """A stack of Linear + ReLU blocks, big enough that its activations dominate memory;
    with ``checkpointed``, each block's activations are recomputed in the backward pass
    instead of kept (torch.utils.checkpoint, use_reentrant=False as torch recommends)."""

    def __init__(self, width: int = 512, depth: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(),
                                                  nn.Linear(width, width), nn.ReLU())
                                    for _ in range(depth))
        self.checkpointed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def bytes_saved_for_backward(step: Callable[[], Any]) -> int:
    """The bytes of the tensors autograd keeps for the backward pass while ``step`` builds
    its graph (each storage counted once): the activation memory that batch size drives and
    checkpointing trades for recomputation. It works the same on every device."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(storages.values())


def training_step_memory(model: Blocks, batch_size: int, device: torch.device,
                         amp: str | None = None) -> tuple[int, int | None]:
    """One forward and backward pass: (bytes saved for backward, the CUDA allocator's peak
    bytes or None off CUDA)."""
    x = torch.randn(batch_size, model.blocks[0][0].in_features, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        with autocast(device, amp):
            loss = model(x).float().pow(2).mean()
        loss.backward()

    saved = bytes_saved_for_backward(step)
    model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return saved, peak


def checkpointed_gradients_match(model: Blocks, device: torch.device) -> bool:
    """The gradients with checkpointing equal those without: recomputing gives the same."""
    x = torch.randn(16, model.blocks[0][0].in_features, device=device)
    grads = []
    for checkpointed in (False, True):
        model.checkpointed = checkpointed
        model.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.checkpointed = False
    model.zero_grad(set_to_none=True)
    return all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def train_in_precision(amp: str | None, args: Any,
                       device: torch.device) -> tuple[list[float], float]:
    """The GPU guide's mixed precision on section 9.2's model, data and loop (a07's flags in
    ``args``): autocast in ``amp`` (None: float32, as a07), and for float16 the guide's
    ``torch.amp.GradScaler``, which multiplies the loss before backward so that small float16
    gradients do not round to zero, and divides them again before the step. (losses, training
    accuracy)."""
    train_loader, _ = toy_loaders(args.batch_size)
    torch.manual_seed(args.seed)
    model = NeuralNetwork(2, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    losses = []
    for _ in range(args.epochs):
        model.train()
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            with autocast(device, amp):
                loss = nn.functional.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            (scaler.scale(loss) if scaler else loss).backward()
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            losses.append(loss.item())
    return losses, compute_accuracy(model, train_loader, device)
