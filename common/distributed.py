"""What a08 adds to section 9.3 beyond the tutorial, kept here so that a08 reads like the section.

- ``DistEnv``: the launcher's variables. Global RANK names the process (sampler, log prefix,
  process group); LOCAL_RANK only picks the GPU on this machine. The published script used
  LOCAL_RANK for everything, which breaks on two machines.
- ``choose_backend``: NCCL only where there are CUDA GPUs and NCCL; gloo on CPUs, Macs, Windows.
- ``fit_training_data``: noisy copies of the toy data when the world is too large for it.
- ``count_correct_globally``: accuracy over all processes, each example counted once.
- ``print_line``: one write per line, so lines from different ranks never splice.
- ``timed``: training time and throughput on rank 0, start-up excluded.
- ``store_for_this_attempt``: a key-value store that survives torchrun's restarts (see there).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset

from common import ToyDataset, count_correct


@dataclass(frozen=True)
class DistEnv:
    rank: int  # global: unique across all machines
    local_rank: int  # on this machine: which GPU to use
    world_size: int  # processes on all machines
    local_world_size: int  # processes on this machine
    launched: bool  # started by torchrun (else: one plain process)

    @classmethod
    def from_environ(cls) -> DistEnv:
        env = os.environ
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return cls(rank=0, local_rank=0, world_size=1, local_world_size=1, launched=False)
        world_size = int(env["WORLD_SIZE"])
        return cls(rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
                   world_size=world_size,
                   local_world_size=int(env.get("LOCAL_WORLD_SIZE", world_size)),
                   launched=True)


class RankZeroParser(argparse.ArgumentParser):
    """An ArgumentParser that prints usage errors and --help on global rank 0 only, so that a
    mistyped flag under torchrun gives one message rather than one per process."""

    def _print_message(self, message: str, file=None) -> None:
        if DistEnv.from_environ().rank == 0:
            super()._print_message(message, file)


def choose_backend(device_type: str, system: str | None = None) -> str:
    """'nccl' for CUDA GPUs where NCCL exists (not on Windows), else 'gloo'."""
    system = system or platform.system()
    if device_type == "cuda" and system != "Windows" and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def gpu_shortage(local_world_size: int, gpu_count: int) -> str | None:
    """Why this node cannot give each process its own GPU, or None if it can."""
    if gpu_count == 0:
        return "this machine has no usable CUDA GPU; use --device cpu (or auto)"
    if local_world_size > gpu_count:
        return (f"{local_world_size} processes on this machine but only {gpu_count} GPU(s), "
                f"and NCCL refuses two processes on one GPU; use "
                f"--nproc_per_node={gpu_count}, or --device cpu")
    return None


def samples_needed(world_size: int, batch_size: int) -> int:
    """The fewest training examples that give every process one full batch."""
    return world_size * batch_size


def gives_full_batches(num_samples: int, world_size: int, batch_size: int) -> bool:
    # DistributedSampler hands each process ceil(num_samples / world_size) examples.
    return math.ceil(num_samples / world_size) >= batch_size


def fit_training_data(X: torch.Tensor, y: torch.Tensor, num_samples: int,
                      seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``num_samples`` of: the examples themselves, then noisy copies of them
    (Gaussian noise with std 0.1, as the tutorial suggests), from a private generator so that
    the global random state, and with it the model's initial weights, stays the same."""
    if num_samples <= len(y):
        return X[:num_samples], y[:num_samples]
    copies = math.ceil(num_samples / len(y)) - 1
    generator = torch.Generator().manual_seed(seed)
    noisy = [X + 0.1 * torch.randn(X.shape, generator=generator) for _ in range(copies)]
    return torch.cat([X, *noisy])[:num_samples], y.repeat(copies + 1)[:num_samples]


def count_correct_globally(model: torch.nn.Module, dataset: ToyDataset, env: DistEnv,
                           device: torch.device, batch_size: int) -> tuple[int, int]:
    """(correct, total) over the whole dataset: each process scores a disjoint slice (no
    padding, unlike DistributedSampler), then the counts are summed across processes."""
    mine = Subset(dataset, range(env.rank, len(dataset), env.world_size))
    correct, total = count_correct(model, DataLoader(mine, batch_size=batch_size), device)
    counts = torch.tensor([correct, total], dtype=torch.int64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return int(counts[0]), int(counts[1])


def print_line(text: str) -> None:
    """Print ``text`` and a newline in one write. torchrun runs Python unbuffered, where print()
    writes each piece separately and lines from different processes interleave mid-line."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def store_for_this_attempt(env: DistEnv, timeout: timedelta) -> dist.Store | None:
    """The store to build the process group on; None means torch's default (env://).

    One plain process: an in-memory store, so no port is needed.

    Under torchrun: the store that torchrun's agent hosts outlives the workers it restarts
    (``--max-restarts``), and torch's default keys for the process group are the same in every
    attempt. Restarted workers can then read the addresses their dead predecessors left there,
    and gloo fails in ``connectFullMesh`` (Connection refused) or waits for keys that never
    change. Prefixing the keys with the restart count gives every attempt keys of its own.
    """
    if not env.launched:
        return dist.HashStore()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None  # rank 0 hosts a fresh store in each attempt: nothing stale to read
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world_size=env.world_size, is_master=False, timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"a08/attempt{attempt}", store)


@contextmanager
def timed(env: DistEnv, num_samples: int) -> Iterator[None]:
    """Time the enclosed training on all processes together (a barrier at each end) and print,
    on rank 0, the seconds and the samples per second over all processes."""
    dist.barrier()
    start = time.perf_counter()
    yield
    dist.barrier()
    seconds = time.perf_counter() - start
    if env.rank == 0:
        print_line(f"Training time: {seconds:.3f} s for {num_samples} samples, "
                   f"{num_samples / seconds:.0f} samples/s over all processes "
                   f"(start-up excluded)")
