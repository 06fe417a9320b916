"""Mixed precision and memory, for a07 and a08 ``--amp`` and the GPU guide's parts on them:
autocast around the tutorial's forward pass, and what one training step keeps in memory with
and without gradient checkpointing."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from common import NeuralNetwork, compute_accuracy, toy_loaders

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def add_amp_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--amp", choices=tuple(AMP_DTYPES), default=None,
                        help="train under autocast in bfloat16 (any device) or float16 (CUDA) "
                             "(default: off, float32 as in the tutorial)")


def check_amp(parser: argparse.ArgumentParser, amp: str | None, device_type: str) -> None:
    """float16 autocast needs CUDA (and its loss scaling); bfloat16 runs everywhere."""
    if amp == "fp16" and device_type != "cuda":
        parser.error(f"argument --amp: fp16 needs a CUDA GPU (this run trains on "
                     f"{device_type}); use --amp bf16, which runs everywhere")


def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` in the --amp precision on the device's type, or nothing without
    --amp. (``torch.cuda.amp.autocast``, which the GPU guide names, is deprecated for this.)
    a07 and a08 keep the tutorial's own backward and step lines, so --amp fp16 trains without
    a GradScaler: this small model's gradients stay far inside float16's range. The GPU guide's
    part on mixed precision shows the scaler (``train_float16_with_scaler``)."""
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


def train_float16_with_scaler(seed: int, epochs: int,
                              device: torch.device) -> tuple[list[float], float]:
    """The GPU guide's float16 recipe on section 9.2's model and data (CUDA): autocast, and
    ``torch.amp.GradScaler``, which multiplies the loss before backward so that small float16
    gradients do not round to zero, and divides them again before the step."""
    train_loader, _ = toy_loaders()
    torch.manual_seed(seed)
    model = NeuralNetwork(2, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler(device.type)
    losses = []
    for _ in range(epochs):
        model.train()
        for features, labels in train_loader:
            features, labels = features.to(device), labels.to(device)
            with torch.autocast(device_type=device.type, dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
    return losses, compute_accuracy(model, train_loader, device)
