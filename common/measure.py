"""Measurements for the GPU guide (a07 --gpu-guides, --benchmark) and section 9.1's Exercise
A.4 (a07 --benchmark): how long a matrix product takes, whether this CPU computes bfloat16 fast,
TF32 on CUDA's tensor cores, whether this torch has autocast in a precision on a device, and the
bytes autograd keeps for the backward pass (of a model whose ``blocks[0][0]`` is its first
Linear layer, as Blocks)."""

from __future__ import annotations

import contextlib
import statistics
import timeit
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def time_matmul(shape: tuple[int, int, int], device: torch.device,
                dtype: torch.dtype = torch.float32) -> float:
    """Median seconds of an (m x k) @ (k x n) product, waited for on an accelerator, with
    torch's CPU threads. Python's timeit: torch.utils.benchmark needs setuptools before torch
    2.5, which Python 3.12's virtual environments lack (pytorch/pytorch#127921)."""
    generator = torch.Generator().manual_seed(shape[0])
    a = torch.rand(shape[:2], generator=generator).to(device, dtype)
    b = torch.rand(shape[1:], generator=generator).to(device, dtype)
    (a @ b).sum().item()  # warm-up: the first call pays for kernel selection
    wait = (lambda: None) if device.type == "cpu" else getattr(torch, device.type).synchronize
    timer = timeit.Timer(lambda: (a @ b, wait()))
    number = max(1, round(0.04 / max(timer.timeit(1), 1e-7)))  # calls in 0.04 s
    return statistics.median(timer.repeat(repeat=5, number=number)) / number


PROBE = 256  # a product any CPU computes within a second, in any precision


def cpu_slowdown(dtype: torch.dtype) -> float:
    """How many times float32's time a PROBE x PROBE product in ``dtype`` takes on the CPU: a
    CPU without hardware for it converts every element (one 2048 x 2048 bfloat16 product took
    67 s on a 2-core VM)."""
    cpu = torch.device("cpu")
    return time_matmul((PROBE,) * 3, cpu, dtype=dtype) / time_matmul((PROBE,) * 3, cpu)


@contextlib.contextmanager
def tf32_matmul(enabled: bool) -> Iterator[None]:
    """float32 matrix products on CUDA's TF32 tensor cores, or not, in the enclosed block:
    ``fp32_precision`` from torch 2.9 (2.9.x warns on reading ``allow_tf32``), before it
    ``allow_tf32``."""
    matmul = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    previous = getattr(matmul, name)
    setattr(matmul, name, ("tf32" if enabled else "ieee") if name == "fp32_precision" else enabled)
    try:
        yield
    finally:
        setattr(matmul, name, previous)


def from_parameters_only(fn: Any) -> bool:
    """A saved tensor's grad_fn that leads back to parameters alone: a weight's view or cast."""
    if fn is None:
        return False
    if type(fn).__name__ == "AccumulateGrad":
        return True
    return bool(fn.next_functions) and all(from_parameters_only(f) for f, _ in fn.next_functions)


def bytes_saved_for_backward(step: Callable[[], Any]) -> tuple[int, int]:
    """(activations, weights): the bytes of the tensors autograd keeps for the backward pass
    while ``step`` builds its graph (each storage counted once), split into what the batch
    makes (activations: batch size drives them, checkpointing trades them for recomputation)
    and the weights, or their casts and views, kept beside them. The same on every device."""
    storages: dict[int, tuple[int, bool]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        weight = (tensor.is_leaf and tensor.requires_grad) or from_parameters_only(tensor.grad_fn)
        storages[storage.data_ptr()] = (storage.nbytes(), weight)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return (sum(size for size, weight in storages.values() if not weight),
            sum(size for size, weight in storages.values() if weight))


def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """Autocast in ``amp`` ('bf16', 'fp16'), or float32 for None."""
    return torch.autocast(device.type, AMP_DTYPES[amp]) if amp else contextlib.nullcontext()


def training_step_memory(model: torch.nn.Module, batch_size: int, device: torch.device,
                         amp: str | None = None) -> tuple[int, int, int | None]:
    """One forward and backward pass: (activations saved for backward, weights saved beside
    them, the CUDA allocator's peak bytes or None off CUDA), in bytes."""
    x = torch.randn(batch_size, model.blocks[0][0].in_features, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> None:
        with autocast(device, amp):
            loss = model(x).float().pow(2).mean()
        loss.backward()

    activations, weights = bytes_saved_for_backward(step)
    model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return activations, weights, peak


def checkpointed_gradients_match(model: torch.nn.Module, device: torch.device) -> bool:
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


def dtype_problem(dtype: torch.dtype, device_type: str) -> str | None:
    """Why no tensor in ``dtype`` can be made on ``device_type``, or None: an MPS without
    bfloat16 (macOS 13, torch 2.8 and older; an Intel Mac's AMD GPU) says so only when asked."""
    try:
        torch.zeros(1, dtype=dtype, device=device_type)
    except (TypeError, RuntimeError, AssertionError) as err:  # the last: a CPU-only build
        return str(err).splitlines()[0]
    return None


def amp_problem(dtype: torch.dtype, device_type: str) -> str | None:
    """Why autocast in ``dtype`` cannot run on ``device_type``, or None. Where torch lacks a
    dtype it warns and computes in float32: refused too, not mislabelled."""
    name = str(dtype).removeprefix("torch.")
    if problem := dtype_problem(dtype, device_type):
        return f"{name} on {device_type}: {problem}"
    if dtype == torch.float16 and device_type == "cpu":
        return "float16 autocast is for GPUs (CUDA, or MPS with torch 2.5+); on the CPU use bf16"
    is_available = getattr(torch.amp, "is_autocast_available", None)  # torch 2.4+
    if is_available is not None and not is_available(device_type):
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
