"""a08's processes, not the tutorial's code: flags and launch variables checked before any
process waits, a device each, --spawn, data for every process, rank 0's summary."""

from __future__ import annotations

import argparse
import gc
import logging
import math
import multiprocessing
import os
import platform
import signal
import sys
import time
from collections import namedtuple
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.utils.distributed import get_free_port
from torch.utils.data import DataLoader, Subset

from common import checkpoints, compute_accuracy, devices, flags, plots

# rank: over all machines; local_rank: on this one, it picks the GPU; spawn: --spawn's parent
Launch = namedtuple("Launch", "rank local_rank world_size local_world_size spawn",
                    defaults=(0, 0, 1, 1, None))


def read_launch(env=os.environ) -> Launch:
    """torchrun's variables (or --spawn's), each checked: one line naming what to set."""
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return Launch()  # one plain process
    world = _variable(env, "WORLD_SIZE", 1, 10**6)
    rank = _variable(env, "RANK", 0, world - 1)
    local_world = _variable(env, "LOCAL_WORLD_SIZE", 1, world, world)
    local_rank = _variable(env, "LOCAL_RANK", 0, local_world - 1,
                           rank if local_world == world else None)
    if not env.get("MASTER_ADDR", "").strip():
        raise flags.UserError("RANK and WORLD_SIZE are set but MASTER_ADDR is not: set it to "
                              "the address of process 0's machine (and MASTER_PORT), or start "
                              "a08 with torchrun, which sets them all")
    _variable(env, "MASTER_PORT", 1, 65535)
    return Launch(rank, local_rank, world, local_world)


def _variable(env, name: str, low: int, high: int, default: int | None = None) -> int:
    text = env.get(name)
    if text is None and default is not None:
        return default
    if text is None or not text.strip().isdigit() or not low <= int(text) <= high:
        raise flags.UserError(f"{name + ' is not set' if text is None else f'{name}={text!r}'}"
                              f": set it to a whole number from {low} to {high}, or start a08 "
                              f"with torchrun, which sets it")
    return int(text)


def parse_a08_flags(doc: str) -> tuple[argparse.Namespace, Launch, torch.device]:
    """a08's flags, and this process's place and device, checked before any process waits."""
    parser = flags.Parser(doc)
    flags.add_training_flags(parser)
    plots.add_plot_flag(parser)
    devices.add_amp_flag(parser)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: one CUDA GPU per process where there are enough, else the "
                             "CPU (default: %(default)s)")
    parser.add_argument("--num-samples", type=flags.POSITIVE, help="training examples, with "
                        "noisy copies past 5 (default: 5, more where a process lacks a batch)")
    parser.add_argument("--timeout", type=flags.number(float, 0, 2e6), default=120,
                        help="seconds to wait for the other processes (default: %(default)s)")
    parser.add_argument("--snapshot", metavar="PATH", help="save training state here after "
                        "every epoch; resume from it (default: no snapshots)")
    parser.add_argument("--spawn", type=flags.POSITIVE, metavar="N", help="start N processes "
                        "here without torchrun, as on Windows (default: off)")
    args = parser.parse_args()
    spawning = args.spawn and multiprocessing.parent_process() is None  # not its workers
    if spawning and "RANK" in os.environ:
        parser.error("argument --spawn: torchrun started the processes already; use one or "
                     "the other")
    launch = Launch(0, 0, args.spawn, args.spawn, args.spawn) if spawning else read_launch()
    if args.snapshot and launch.rank == 0 and \
            (problem := checkpoints.check_writable(args.snapshot, "--snapshot")):
        parser.error(f"argument --snapshot: {problem}")
    if args.num_samples and lacks_a_full_batch(args.num_samples, launch.world_size, args):
        parser.error(f"argument --num-samples: {args.num_samples} examples leave some of the "
                     f"{launch.world_size} processes without a full batch of {args.batch_size}; "
                     f"use at least {launch.world_size * args.batch_size}")
    device = device_for_process(parser, args.device, launch)
    devices.check_amp(parser, args.amp, device.type)
    return args, launch, device


def device_for_process(parser: argparse.ArgumentParser, name: str,
                       launch: Launch) -> torch.device:
    """One GPU per process (LOCAL_RANK's), or the CPU, saying why, where GPUs cannot serve."""
    if name == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count()
    unseen = None if gpus else devices.cpu_build_beside_an_nvidia_gpu()  # asks nvidia-smi
    if gpus == 0:
        shortage = unseen or "this machine has no usable CUDA GPU; use --device cpu (or auto)"
    elif platform.system() == "Windows":  # no NCCL; gloo crashes on CUDA tensors from 2.8
        shortage = ("on Windows the processes meet through gloo, which cannot carry CUDA "
                    "tensors (pytorch/pytorch#186535); use --device cpu (or auto), or WSL2")
    elif launch.local_world_size > gpus:
        shortage = (f"{launch.local_world_size} processes on this machine but only {gpus} "
                    f"GPU(s), and NCCL refuses two processes on one GPU; start {gpus}, or use "
                    f"--device cpu")
    else:
        shortage = devices.gpu_missing_from_build()
    if shortage and name == "cuda":
        parser.error(f"argument --device cuda: {shortage}")
    if not shortage:
        return torch.device("cuda", launch.local_rank)
    if (gpus or unseen) and not (launch.rank or launch.spawn):
        print(f"Note: training on the CPU: {shortage}")  # once, not by --spawn's parent too
    return torch.device("cpu")


def store_for_this_attempt(timeout: float) -> dict:
    """Under torchrun, ``init_process_group``'s store: the agent's, which outlives the workers
    it restarts (--max-restarts), where every attempt's process group uses the same keys, so
    the restarted workers read their predecessors' (gloo fails in connectFullMesh, or waits).
    Each attempt's keys get a prefix: how many times this rank has started, a count the same
    in every process of an attempt (TORCHELASTIC_RESTART_COUNT is not, pytorch#135712)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}  # env://, as the text has it
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=timeout))
    starts = agent.add(f"a08/starts/rank{os.environ['RANK']}", 1)
    return {"store": dist.PrefixStore(f"a08/attempt{starts}", agent)}


def spawn(main: Callable[[], None], nprocs: int) -> None:
    """--spawn N: ``main`` in N processes, as the book's DDP-script.py starts them, meeting at
    a free port without libuv (Windows' torch lacks it). A worker that fails has said why."""
    import torch.multiprocessing as mp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(get_free_port()), USE_LIBUV="0")
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # ours says it
    try:
        mp.spawn(_worker, args=(nprocs, main), nprocs=nprocs)
    except mp.ProcessExitedException as err:
        if (code := err.exit_code or 1) < 0:  # a signal ended it; torch ended the others
            print(f"error: process {err.error_index} was ended by "
                  f"{signal.Signals(-code).name}", file=sys.stderr)
        sys.exit(128 - code if code < 0 else code)


def _worker(index: int, nprocs: int, main: Callable[[], None]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as run() does for a script
    os.environ.update(RANK=str(index), LOCAL_RANK=str(index), WORLD_SIZE=str(nprocs),
                      LOCAL_WORLD_SIZE=str(nprocs))
    flags.run(main)


def lacks_a_full_batch(num_samples: int, world_size: int, args: argparse.Namespace) -> bool:
    """DistributedSampler deals each process ceil(n / N) examples; the loader drops a short
    last batch, so a process with fewer than --batch-size trains on nothing."""
    return math.ceil(num_samples / world_size) < args.batch_size


def enlarge_for_processes(X: torch.Tensor, y: torch.Tensor, world_size: int,
                          args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """--num-samples examples, else enough for a full batch each: the examples, then noisy
    copies (std 0.1, as the text's remedy) from a generator that leaves the seed's alone."""
    num_samples = args.num_samples or len(y)
    if lacks_a_full_batch(num_samples, world_size, args):
        num_samples = world_size * args.batch_size
        if dist.get_rank() == 0:
            print(f"Note: {len(y)} examples leave some of the {world_size} processes without "
                  f"a full batch of {args.batch_size}; training on {num_samples} (the examples "
                  f"plus noisy copies; see --num-samples).")
    copies = math.ceil(num_samples / len(y)) - 1
    noise = 0.1 * torch.randn((copies, *X.shape), generator=torch.Generator().manual_seed(
        args.seed))
    X = torch.cat([X, (X + noise).reshape(-1, X.shape[1])])
    return X[:num_samples], y.repeat(copies + 1)[:num_samples]


def process_name(device: torch.device) -> str:
    """[GPU0], [GPU1], ... as in the text, or [CPU0], ... on CPUs: the global rank."""
    return f"[{'GPU' if device.type == 'cuda' else 'CPU'}{dist.get_rank()}]"


def report_summary(model: torch.nn.Module, loaders: tuple[DataLoader, ...],
                   device: torch.device) -> None:
    """Rank 0's last lines: accuracy with every example counted once (DistributedSampler pads,
    every process scores the whole test set); whether DDP kept the parameters identical."""
    counts = []
    for loader in loaders:  # each process scores a slice; the counts are summed
        mine = Subset(loader.dataset, range(dist.get_rank(), len(loader.dataset),
                                            dist.get_world_size()))
        correct = compute_accuracy(model.module, DataLoader(mine, batch_size=64), device) \
            if len(mine) else 0
        counts.append(torch.tensor([round(correct * len(mine)), len(mine)], device=device))
        dist.all_reduce(counts[-1])
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    dist.broadcast(rank_0s := mine.clone(), src=0)
    dist.all_reduce(differing := torch.tensor([int(not torch.equal(mine, rank_0s))], device=device))
    if dist.get_rank() == 0:
        processes = dist.get_world_size()
        for name, count in zip(("training", "test"), counts, strict=True):
            correct, total = count.tolist()
            print(f"Global {name} accuracy over all {processes} processes: "
                  f"{correct / total} ({correct} of {total} examples)")
        print(f"Parameters identical in all {processes} processes: {int(differing) == 0} "
              f"(what averaging the gradients promises)")


def free_before_leaving() -> None:
    """After ``del model``: the DDP model collected before its group goes (else gloo may abort
    at exit), and 50 ms without the GIL for gloo's thread (torch < 2.5 deadlocks, #56297)."""
    gc.collect()
    time.sleep(0.05)
