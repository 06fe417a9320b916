"""What a08 adds to section 9.3 beyond the tutorial, kept here so that a08 reads like the section.

- ``DistEnv``: the launcher's variables. Global RANK names the process (sampler, log prefix,
  process group); LOCAL_RANK only picks the GPU on this machine. The published script used
  LOCAL_RANK for everything, which breaks on two machines.
- ``choose_backend``: NCCL only where there are CUDA GPUs and NCCL; gloo on CPUs, Macs, Windows.
- ``fit_training_data``: noisy copies of the toy data when the world is too large for it.
- ``count_correct_globally``: accuracy over all processes, each example counted once.
- ``print_line``: one write per line, so lines from different ranks never splice.
- ``DistributedBatchSampler``: the DistributedSampler's batches as index tensors (fast).
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
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

from common import ToyDataset, count_correct
from common.cli import positive_float, positive_int
from common.devices import add_device_flag


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


def add_ddp_flags(parser: argparse.ArgumentParser) -> None:
    """a08's flags beyond the tutorial's training knobs."""
    add_device_flag(parser, choices=("auto", "cpu", "cuda"),
                    help="auto: one CUDA GPU per process where there are enough, else the CPU")
    parser.add_argument("--num-samples", type=positive_int, default=None,
                        help="training-set size; more than 5 adds noisy copies of the toy data "
                             "(default: the tutorial's 5, enlarged only if some process would "
                             "get no full batch)")
    parser.add_argument("--timeout", type=positive_float, default=120.0,
                        help="seconds to wait for the other processes in any collective "
                             "before giving up (default: %(default)s)")
    parser.add_argument("--log-every", type=positive_int, default=1, metavar="K",
                        help="print the loss of every K-th batch of an epoch "
                             "(default: %(default)s, every batch, as in the tutorial)")
    parser.add_argument("--snapshot", metavar="PATH", default=None,
                        help="save training state here after every epoch, and resume from it "
                             "if it exists (default: no snapshots)")


def check_ddp_flags(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    env: DistEnv) -> None:
    """Usage errors for what no single flag's type can check; also turns args.device into a
    torch.device. Runs before any process group exists, so a bad flag never hangs the run."""
    if args.snapshot is not None and not os.path.isdir(os.path.dirname(args.snapshot) or "."):
        parser.error(f"argument --snapshot: the folder of {args.snapshot} does not exist")
    if args.num_samples is not None and not gives_full_batches(
            args.num_samples, env.world_size, args.batch_size):
        parser.error(f"argument --num-samples: {args.num_samples} examples leave some of the "
                     f"{env.world_size} processes without a full batch of {args.batch_size}; "
                     f"use at least {samples_needed(env.world_size, args.batch_size)}")
    args.device = ddp_device(parser, args.device, env)


def ddp_device(parser: argparse.ArgumentParser, name: str, env: DistEnv) -> torch.device:
    """One GPU per process (LOCAL_RANK picks it), or the CPU."""
    if name == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count()
    shortage = gpu_shortage(env.local_world_size, gpus)
    if shortage and name == "cuda":
        parser.error(f"argument --device cuda: {shortage}")
    if shortage:  # auto: fall back to the CPU, and say why where there are GPUs
        if gpus and env.rank == 0:
            print_line(f"Note: training on the CPU: {shortage}")
        return torch.device("cpu")
    return torch.device("cuda", env.local_rank)


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
    noise = 0.1 * torch.randn((copies, *X.shape), generator=generator)
    noisy = (X + noise).reshape(-1, *X.shape[1:])
    return torch.cat([X, noisy])[:num_samples], y.repeat(copies + 1)[:num_samples]


def index_dtype(n: int) -> torch.dtype:
    """The smaller integer type that can index ``n`` examples."""
    return torch.int32 if n <= torch.iinfo(torch.int32).max else torch.int64


class DistributedBatchSampler(DistributedSampler):
    """The batches that ``DataLoader(ds, batch_size=B, drop_last=True,
    sampler=DistributedSampler(ds))`` makes, the same indices in the same order, but each batch
    as one index tensor. Use with ``DataLoader(ds, batch_size=None, sampler=...)``: a batch is
    then fetched by one indexing operation, where the tutorial's loader turns every index into
    a Python int, fetches each example alone and stacks them (profiled: 0.8 us an example, more
    than the model's own forward and backward pass at large batch sizes)."""

    def __init__(self, dataset: Dataset, batch_size: int, **kwargs) -> None:
        super().__init__(dataset, **kwargs)
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[torch.Tensor]:
        # DistributedSampler.__iter__, in tensors: shuffle by seed + epoch, pad by repeating
        # (or drop) to a multiple of the number of processes, then every num_replicas-th index.
        n = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            # int32 where it fits: the same permutation as DistributedSampler's int64 one (same
            # random draws), in half the memory, so ~1.8x faster for millions of examples
            indices = torch.randperm(n, generator=generator, dtype=index_dtype(n))
        else:
            indices = torch.arange(n, dtype=index_dtype(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            indices = indices.repeat(math.ceil(self.total_size / n))[:self.total_size]
        mine = indices[self.rank:self.total_size:self.num_replicas]
        full = len(mine) // self.batch_size * self.batch_size  # drop_last for the batches
        return iter(mine[:full].split(self.batch_size) if full else ())

    def __len__(self) -> int:
        return self.num_samples // self.batch_size


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
