"""a08's processes, not the tutorial's code: launch variables checked before any process
waits, a store torchrun's restarts can use, --spawn, data for every process, rank 0's summary,
and leaving the group cleanly."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from collections import namedtuple
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DataLoader, Subset

from common import compute_accuracy
from common.runner import UserError, run, whole_lines

# rank: over all machines; local_rank: on this one, it picks the GPU
Launch = namedtuple("Launch", "rank local_rank world_size local_world_size",
                    defaults=(0, 0, 1, 1))


# a08's one note on its losses, where the learner compares them with the blog's
LOSSES_NOTE = ("(The blog printed 0.62, 0.32, 0.11, ... in one process, with torch 2.0.1; "
               "today's torch\nprints 0.66, 0.33, 0.10, ... on CPUs and GPUs alike: the loss "
               "falls and the accuracy\nis 1.0 all the same.)")


def read_launch(env=os.environ, spawn: int | None = None) -> Launch:
    """torchrun's variables (or --spawn N's processes), each checked: one line naming what to
    set. MASTER_PORT, where set, is where processes meet under any launch: checked too."""
    if spawn or ("RANK" not in env and "WORLD_SIZE" not in env):  # or one plain process
        if "MASTER_PORT" in env:
            _variable(env, "MASTER_PORT", 1, 65535, fix="unset it")
        return Launch(0, 0, spawn, spawn) if spawn else Launch()
    world = _variable(env, "WORLD_SIZE", 1, 10**6)
    rank = _variable(env, "RANK", 0, world - 1)
    local_world = _variable(env, "LOCAL_WORLD_SIZE", 1, world, world)
    local_rank = _variable(env, "LOCAL_RANK", 0, local_world - 1,
                           rank if local_world == world else None)
    if not env.get("MASTER_ADDR", "").strip():
        raise UserError("RANK and WORLD_SIZE are set but MASTER_ADDR is not: set it to the "
                        "address of process 0's machine (and MASTER_PORT), or start a08 with "
                        "torchrun, which sets them all")
    _variable(env, "MASTER_PORT", 1, 65535)
    return Launch(rank, local_rank, world, local_world)


def _variable(env, name: str, low: int, high: int, default: int | None = None,
              fix: str = "start a08 with torchrun, which sets it") -> int:
    text = env.get(name)
    if text is None and default is not None:
        return default
    if text is None or not text.strip().isdigit() or not low <= int(text) <= high:
        raise UserError(f"{name + ' is not set' if text is None else f'{name}={text!r}'}"
                        f": set it to a whole number from {low} to {high}, or {fix}")
    return int(text)


def store_for_torchrun_restarts(timeout: float) -> dist.Store | None:
    """None (``init_process_group`` reads env://, as the text has it) but under torchrun's agent,
    whose store outlives the workers it restarts (--max-restarts) while every attempt's process
    group uses the same keys: restarted workers would read their predecessors' (gloo fails in
    connectFullMesh, or waits). So each attempt's keys get a prefix: how many times this rank
    has started, the same in every process of an attempt (TORCHELASTIC_RESTART_COUNT is not,
    pytorch#135712)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=timeout))
    starts = agent.add(f"a08/starts/rank{os.environ['RANK']}", 1)
    return dist.PrefixStore(f"a08/attempt{starts}", agent)


def start(main: Callable[..., None], rank: int, world_size: int, *args: object,
          spawn: int | None = None, **kwargs: object) -> None:
    """a08's ``main(rank, world_size, *args, **kwargs)``: in this process, run so that an error
    is one line (``runner.run``), or with --spawn N in N new processes (``start_processes``)."""
    if spawn:
        start_processes(main, spawn, *args, **kwargs)
    else:
        run(main, rank, world_size, *args, **kwargs)


def start_processes(main: Callable[..., None], nprocs: int, *args: object,
                    **kwargs: object) -> None:
    """--spawn N: ``main(rank, N, *args, **kwargs)`` in N processes, as the book's
    DDP-script.py starts them, meeting at MASTER_PORT where it is set (as the text keeps it),
    else at a free port, without libuv (Windows' torch lacks it), each seeded as this one is
    (new Pythons: they skip ``__main__``). A worker that fails has said why in one line; one
    that raised (an error in a line the learner edited): its traceback, once, not inside this
    process's own; one that ended without a word (a crash, a signal): one line, with its exit
    code's meaning on Windows, and its exit status as this process's."""
    import torch.multiprocessing as mp
    from torch.distributed.elastic.utils.distributed import get_free_port

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as run() does for a script
    port = os.environ.get("MASTER_PORT") or str(get_free_port())
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, USE_LIBUV="0")
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # ours says it
    whole_lines()
    try:
        context = mp.start_processes(_worker, nprocs=nprocs, join=False, args=(
            nprocs, torch.initial_seed(), main, args, kwargs))
        end_with_this_process(context.processes)
        while not context.join():
            pass
    except mp.ProcessRaisedException as err:  # torch's spawn carries the worker's traceback
        print(str(err).strip(), file=sys.stderr)
        sys.exit(1)
    except mp.ProcessExitedException as err:  # torch ended the others
        code = err.exit_code or 1
        if code < 0:  # a signal (POSIX)
            print(f"error: process {err.error_index} was ended by "
                  f"{signal.Signals(-code).name}", file=sys.stderr)
        elif code != 1:  # 1: the worker said why (runner.fail)
            meaning = WINDOWS_EXIT_CODES.get(code)
            print(f"error: process {err.error_index} ended with exit code {code}" + (
                f" (0x{code:08X}: {meaning})" if meaning else "") + ' without saying why (see '
                'TROUBLESHOOTING.md: "error: process N")', file=sys.stderr)
        # Windows' codes are 32-bit: sys.exit of one above 2**31 ends as -1 on Python before
        # 3.12.8 (CPython gh-125842); as a negative number it keeps its bits
        sys.exit(128 - code if code < 0 else code - 2**32 if code >= 2**31 else code)


# How Windows ends a process that crashed in native code (NTSTATUS, ntstatus.h): its exit code
WINDOWS_EXIT_CODES = {
    0xC0000005: "an access violation, a crash in native code (torch, a driver, a DLL)",
    0xC0000017: "out of memory",
    0xC00000FD: "a stack overflow",
    0xC000013A: "Ctrl-C, or its console closed",
    0xC0000409: "native code stopped itself (abort, or a failed check)",
}


def end_with_this_process(workers: list) -> None:
    """A signal to this process ends its workers first, then this process as the signal would.
    Linux's workers would end by themselves (torch's spawn asks prctl for a parent-death
    signal); macOS's and Windows' would train on to the end. Windows' console sends Ctrl-C,
    Ctrl-Break and its closing to every process in it; what ends only this process there
    (Task Manager's End task) reaches no handler: TROUBLESHOOTING.md says what to do."""
    def end_all(signum, frame):
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK"):  # SIGHUP: a terminal closed
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), end_all)


def _worker(rank: int, nprocs: int, seed: int, main: Callable[..., None], args: tuple,
            kwargs: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as run() does for a script
    torch.manual_seed(seed)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs),
                      LOCAL_WORLD_SIZE=str(nprocs))
    run(main, rank, nprocs, *args, **kwargs)


def enough_for_every_process(X: torch.Tensor, y: torch.Tensor,
                             batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The examples, and where some process would get less than a full batch (DistributedSampler
    deals each ceil(n / N), the loader drops a short batch), noisy copies (std 0.1, as the
    text's remedy) from a generator of their own, so that the model's initial weights stay the
    text's."""
    world_size = dist.get_world_size()
    if math.ceil(len(y) / world_size) >= batch_size:
        return X, y
    num_samples = world_size * batch_size
    if dist.get_rank() == 0:
        print(f"Note: {len(y)} examples leave some of the {world_size} processes without a "
              f"full batch of {batch_size}; training on {num_samples} (the examples plus noisy "
              f"copies).")
    copies = math.ceil(num_samples / len(y)) - 1
    generator = torch.Generator().manual_seed(torch.initial_seed())
    noise = 0.1 * torch.randn((copies, *X.shape), generator=generator)
    X = torch.cat([X, (X + noise).reshape(-1, X.shape[1])])
    return X[:num_samples], y.repeat(copies + 1)[:num_samples]


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
    mine = parameters_to_vector(model.parameters()).detach()
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
    """50 ms without the GIL for gloo's threads to finish their last work before the group
    goes: else ``destroy_process_group`` may deadlock on torch before 2.5 (pytorch#56297; seen
    on 2.2.2), and a process may abort at exit on newer torch (seen on 2.13 with 8 processes: 1
    run in 6 without it, none in 10 with it)."""
    time.sleep(0.05)


def leave_group() -> None:
    """What a08's last lines do, for a process that leaves early (or a test, or a notebook's
    kernel, that runs main again)."""
    free_before_leaving()
    dist.destroy_process_group()
