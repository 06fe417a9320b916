"""What a08 adds to section 9.3 beyond the tutorial, kept here so that a08 reads like the section.

- ``add_ddp_flags``, ``check_ddp_flags``: a08's flags, checked before any process group
  exists. Global RANK names the process; LOCAL_RANK only picks the GPU on this machine
  (``--device``). The published script used LOCAL_RANK for everything, which breaks on two
  machines.
- ``describe_run``, ``process_name``: what rank 0 says of the run; the [GPU0] line prefix.
- ``enough_examples``: noisy copies of the toy data when there are too many processes for it.
- ``fast_batch_loader``: ``--fast-batches``, the DistributedSampler's batches as index tensors.
- ``report_global_accuracy``: accuracy over all processes, each example counted once.
- ``spawn``: ``--spawn N``, N processes without torchrun.
- ``store_for_this_attempt``: a key-value store that survives torchrun's restarts (see there).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

from common import ToyDataset, compute_accuracy
from common.extras.cli import SPAWNED, UserError, positive_float, positive_int, run
from common.extras.devices import add_device_flag


@dataclass(frozen=True)
class DistEnv:
    """The launcher's variables, read before the process group exists."""

    rank: int  # global: unique across all machines
    local_rank: int  # on this machine: which GPU to use
    world_size: int  # processes on all machines
    local_world_size: int  # processes on this machine
    launched: bool  # started by torchrun (else: one plain process)

    @classmethod
    def from_environ(cls, spawn: int | None = None) -> DistEnv:
        """The variables torchrun (or --spawn) set; ``spawn``: as they will be in the workers
        that --spawn N is about to start."""
        env = os.environ
        if spawn:
            return cls(rank=0, local_rank=0, world_size=spawn, local_world_size=spawn,
                       launched=True)
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
    parser.add_argument("--spawn", type=positive_int, default=None, metavar="N",
                        help="start N processes on this machine without torchrun, with "
                             "torch.multiprocessing.spawn, meeting through a file (no network "
                             "port; works on Windows) (default: off)")
    parser.add_argument("--fast-batches", action="store_true",
                        help="fetch each batch with one indexing operation instead of example "
                             "by example: the same batches in the same order, faster for large "
                             "data sets (default: off, the tutorial's loader)")


def check_ddp_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors for what no single flag's type can check; also turns args.device into a
    torch.device: this process's GPU, or the CPU. Runs before any process group exists, so a
    bad flag never hangs the run."""
    if args.spawn and SPAWNED in os.environ:
        args.spawn = None  # a worker that --spawn started: train, do not spawn again
    elif args.spawn and "RANK" in os.environ:
        parser.error("argument --spawn: torchrun already started the processes; use one or "
                     "the other")
    env = DistEnv.from_environ(args.spawn)
    if args.snapshot is not None and not os.path.isdir(os.path.dirname(args.snapshot) or "."):
        parser.error(f"argument --snapshot: the folder of {args.snapshot} does not exist")
    if args.num_samples is not None and not gives_full_batches(
            args.num_samples, env.world_size, args.batch_size):
        parser.error(f"argument --num-samples: {args.num_samples} examples leave some of the "
                     f"{env.world_size} processes without a full batch of {args.batch_size}; "
                     f"use at least {samples_needed(env.world_size, args.batch_size)}")
    args.device = ddp_device(parser, args.device, env)
    args.timeout = timedelta(seconds=args.timeout)
    if not torch.cuda.is_available():
        # The text's loader pins memory for faster copies to a GPU; without one, torch only
        # warns that pinning does nothing, which a learner can do nothing about.
        warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true")


def process_name(device: torch.device) -> str:
    """The prefix of a process's lines: [GPU0], [GPU1], ... as in the text, or [CPU0], ... where
    the processes train on CPUs. The global rank, unique across machines."""
    return f"[{'GPU' if device.type == 'cuda' else 'CPU'}{dist.get_rank()}]"


def describe_run(device: torch.device) -> None:
    """Rank 0 says how many processes train, on which device, with which backend."""
    if dist.get_rank() == 0:
        print(f"Processes: {dist.get_world_size()}, training on {device.type} "
              f"with the {dist.get_backend()} backend")


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
            print(f"Note: training on the CPU: {shortage}")
        return torch.device("cpu")
    return torch.device("cuda", env.local_rank)


def gpu_shortage(local_world_size: int, gpu_count: int) -> str | None:
    """Why this node cannot give each process its own GPU, or None if it can."""
    if gpu_count == 0:
        return "this machine has no usable CUDA GPU; use --device cpu (or auto)"
    if local_world_size > gpu_count:
        return (f"{local_world_size} processes on this machine but only {gpu_count} GPU(s), "
                f"and NCCL refuses two processes on one GPU; start {gpu_count} "
                f"(--nproc_per_node={gpu_count} or --spawn {gpu_count}), or use --device cpu")
    return None


def samples_needed(world_size: int, batch_size: int) -> int:
    """The fewest training examples that give every process one full batch."""
    return world_size * batch_size


def gives_full_batches(num_samples: int, world_size: int, batch_size: int) -> bool:
    # DistributedSampler hands each process ceil(num_samples / world_size) examples.
    return math.ceil(num_samples / world_size) >= batch_size


def enough_examples(X: torch.Tensor, y: torch.Tensor, args: argparse.Namespace
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The training data, enlarged to ``--num-samples``, or where some process would get no
    full batch (the text asks the reader to uncomment lines for that). Rank 0 says so."""
    world_size = dist.get_world_size()
    num_samples = args.num_samples or len(y)
    if not gives_full_batches(num_samples, world_size, args.batch_size):
        num_samples = samples_needed(world_size, args.batch_size)
        if dist.get_rank() == 0:
            print(f"Note: {len(y)} examples leave some of the {world_size} processes without "
                  f"a full batch of {args.batch_size}; training on {num_samples} (the "
                  f"examples plus noisy copies; see --num-samples).")
    return fit_training_data(X, y, num_samples, args.seed)


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


def fast_batch_loader(dataset: ToyDataset, batch_size: int) -> DataLoader:
    """``--fast-batches``: the batches of the tutorial's ``DataLoader(dataset, batch_size,
    shuffle=False, drop_last=True, sampler=DistributedSampler(dataset))``, the same ones in the
    same order, each fetched by one ``index_select``. The tutorial's loader turns every index
    into a Python int, fetches each example alone and stacks them (profiled on CPU: 0.8 us an
    example, more than the model's own forward and backward pass at large batch sizes)."""
    batches = BatchGatheringDataset(dataset.features, dataset.labels)
    return DataLoader(batches, batch_size=None,
                      sampler=DistributedBatchSampler(batches, batch_size=batch_size))


class BatchGatheringDataset(ToyDataset):
    """A ToyDataset that also takes a whole tensor of indices, and gathers those rows with
    index_select: the same rows as features[indices], ~3x faster on CPU (measured: 2.1 vs
    6.6 ms for a batch of 65536 from 4M examples)."""

    def __getitem__(self, index):
        if (isinstance(index, torch.Tensor) and index.dim() == 1
                and index.dtype in (torch.int32, torch.int64)):
            return self.features.index_select(0, index), self.labels.index_select(0, index)
        return super().__getitem__(index)


def index_dtype(n: int) -> torch.dtype:
    """The smaller integer type that can index ``n`` examples."""
    return torch.int32 if n <= torch.iinfo(torch.int32).max else torch.int64


class DistributedBatchSampler(DistributedSampler):
    """The batches that ``DataLoader(ds, batch_size=B, drop_last=True,
    sampler=DistributedSampler(ds))`` makes, the same indices in the same order, but each batch
    as one index tensor, for ``DataLoader(ds, batch_size=None, sampler=...)``."""

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


def report_global_accuracy(model: torch.nn.Module, train_loader: DataLoader,
                           test_loader: DataLoader, device: torch.device) -> None:
    """Rank 0 prints the accuracy over all processes on the training and the test set, every
    example counted exactly once (in the tutorial, DistributedSampler pads each process's slice
    and every process scores the whole test set on its own)."""
    model = getattr(model, "module", model)  # unwrapped: processes score different slices
    for name, loader in (("training", train_loader), ("test", test_loader)):
        correct, total = count_correct_globally(model, loader.dataset, device)
        if dist.get_rank() == 0:
            print(f"Global {name} accuracy over all {dist.get_world_size()} processes: "
                  f"{correct / total} ({correct} of {total} examples)")


def count_correct_globally(model: torch.nn.Module, dataset: Dataset,
                           device: torch.device) -> tuple[int, int]:
    """(correct, total) over the whole dataset: each process scores a disjoint slice with the
    tutorial's compute_accuracy, then the counts are summed across processes."""
    mine = Subset(dataset, range(dist.get_rank(), len(dataset), dist.get_world_size()))
    total = len(mine)
    correct = 0
    if total:  # a process may get no test example at all
        correct = round(compute_accuracy(model, DataLoader(mine, batch_size=64), device) * total)
    counts = torch.tensor([correct, total], dtype=torch.int64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return int(counts[0]), int(counts[1])


def spawn(main: Callable[[], None], nprocs: int) -> None:
    """--spawn N: run ``main`` in N new processes on this machine, as torchrun would, but with
    torch.multiprocessing.spawn (the way the book's DDP-script.py starts its processes). They
    meet through a file in a temporary folder: no network port and no TCPStore, so this works
    where torchrun cannot start (torch's Windows wheels lack libuv). A worker that fails has
    already said why; the others are stopped and this process exits with its status."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="a08-spawn-") as folder:
        store = os.path.join(folder, "store")
        try:
            mp.spawn(_spawned_worker, args=(nprocs, store, main), nprocs=nprocs)
        except mp.ProcessExitedException as err:
            raise SystemExit(err.exit_code if err.exit_code and err.exit_code > 0 else 1) from None


def _spawned_worker(index: int, nprocs: int, store: str, main: Callable[[], None]) -> None:
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index),
                       "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs),
                       SPAWNED: store})
    run(main)  # its errors end this worker with one line and an exit status, as in the parent


def settle_before_leaving() -> None:
    """Call after dropping the DDP model, right before ``destroy_process_group()``.

    First collect the model (a DDP model freed after its process group may hang or abort: its
    reducer's hooks on the parameters still use the group). Then wait 50 ms without holding the
    GIL: gloo's worker thread may still have to take the GIL to free tensors of the model's
    last operations, and torch before pytorch/pytorch#154976 (2.4.1 among them) destroys the
    gloo group while holding the GIL, waiting for that same thread: a deadlock
    (pytorch/pytorch#56297). Seen here with torch 2.4.1 in 3 of 11 loops of 20 a08 runs that
    end in an error; with the pause, in none of 22.
    """
    gc.collect()
    time.sleep(0.05)


def store_for_this_attempt(timeout: timedelta) -> dist.Store:
    """The key-value store the processes meet through, to build the process group on.

    One plain process: an in-memory store, so no port is needed. The workers of --spawn: a file
    store. Otherwise a TCPStore at MASTER_ADDR:MASTER_PORT, made here rather than inside
    init_process_group so that a master that cannot be reached, or a port in use, ends in one
    line (see ``explain_distributed_error``) instead of torch's log of every retry. Every
    TCPStore made here goes without libuv where torch lacks it (USE_LIBUV=0, as a08 sets on
    Windows).

    Under torchrun: the store that torchrun's agent hosts outlives the workers it restarts
    (``--max-restarts``), and torch's default keys for the process group are the same in every
    attempt. Restarted workers can then read the addresses their dead predecessors left there,
    and gloo fails in ``connectFullMesh`` (Connection refused) or waits for keys that never
    change. So every attempt gets keys of its own, prefixed with how many times this rank has
    started: all processes restart together, so that count is the same in every process of an
    attempt, on every machine. (TORCHELASTIC_RESTART_COUNT is not: each machine's torchrun
    counts on its own, and a restart for a machine that joins late is not counted at all;
    pytorch/pytorch#135712.)
    """
    env = DistEnv.from_environ()
    if not env.launched:
        return dist.HashStore()
    if SPAWNED in os.environ:
        return dist.FileStore(os.environ[SPAWNED], env.world_size)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # rank 0 hosts a fresh store in each attempt: nothing stale to read
        return tcp_store(env.world_size, is_master=env.rank == 0, timeout=timeout)
    store = tcp_store(env.world_size, is_master=False, timeout=timeout)  # torchrun's agent's
    starts = store.add(f"a08/starts/rank{env.rank}", 1)
    return dist.PrefixStore(f"a08/attempt{starts}", store)


def tcp_store(world_size: int, is_master: bool, timeout: timedelta) -> dist.TCPStore:
    """A TCPStore at MASTER_ADDR:MASTER_PORT; torch's C++ log of each failed connection attempt
    (a stack dump per retry) is kept off the terminal: a failure raises all the same."""
    try:
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except (KeyError, ValueError):
        raise UserError("RANK and WORLD_SIZE are set but MASTER_ADDR and MASTER_PORT are not "
                        "(both are needed to meet); start a08 with torchrun, which sets all "
                        "four") from None
    with _stderr_silenced():
        return dist.TCPStore(host, port, world_size=world_size, is_master=is_master,
                             timeout=timeout, use_libuv=os.environ.get("USE_LIBUV", "1") != "0")


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at the null device for the enclosed block (C++ writes there
    directly, past sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def explain_distributed_error(err: Exception) -> str | None:
    """One line, cause and fix, for the ways a process group fails to start or breaks down;
    None for any other error. ``run`` prints it instead of torch's traceback."""
    if not isinstance(err, RuntimeError):  # torch's DistError and its kin are RuntimeErrors
        return None
    message = str(err)
    where = (f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
             f" (MASTER_ADDR:MASTER_PORT)")
    rank = f"process {os.environ.get('RANK', 0)}"
    if "unsupported gloo device" in message or "makeDeviceForHostname" in message:
        return (f"{rank}: gloo found no network device to use on this machine (seen with some "
                f"torch builds on Windows); set GLOO_SOCKET_IFNAME to an interface's name "
                f"(ipconfig or ip addr lists them), or run under WSL2")
    if "EADDRINUSE" in message or "address already in use" in message.lower():
        return (f"{rank}: the port of {where} is already in use (another run?); choose a free "
                f"one with torchrun --master_port=PORT, or use torchrun --standalone")
    if dist.is_available() and dist.is_initialized():
        if any(sign in message for sign in ("Connection closed by peer", "Connection reset",
                                            "Broken pipe", "Timed out", "timed out",
                                            "Connection refused")):
            return (f"{rank} lost contact with another process (it crashed, was killed, or "
                    f"hangs). With --max-restarts=3, torchrun restarts all processes; with "
                    f"--snapshot PATH they, or the same command run again, resume from the "
                    f"last epoch")
        return None
    if isinstance(err, dist.DistError) or "connect" in message:
        return (f"{rank} could not join the process group at {where} within --timeout: check "
                f"that the first machine's torchrun runs, the address and port, that no "
                f"firewall blocks the port, and on several machines GLOO_SOCKET_IFNAME (README: "
                f"Several machines)")
    return None
