"""How a08's processes meet and part: the key-value store they meet through, --spawn, the
one-line explanations of a process group that cannot start or breaks down, and leaving the
group. ``DDP_ENDING`` gives ``cli.run`` what a08 needs on errors and signals."""

from __future__ import annotations

import gc
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from common.extras.cli import Ending, run
from common.extras.launcher import Launch, launch_for_messages
from common.extras.old_torch import device_id, store_uses_libuv

import torch
import torch.distributed as dist


def process_group_options(device: torch.device, launch: Launch,
                          timeout: timedelta) -> dict:
    """What a08 gives ``init_process_group`` beyond the text's backend, rank and world size:
    --timeout, after which a lost peer ends the run instead of a hang; the store of this
    attempt (below); and on CUDA the GPU, which NCCL then knows up front (torch 2.8 to 2.14
    warn otherwise)."""
    return {"timeout": timeout, "store": store_for_this_attempt(launch, timeout),
            **device_id(device)}


def store_for_this_attempt(launch: Launch, timeout: timedelta) -> dist.Store:
    """The key-value store the processes meet through, to build the process group on.

    One plain process: an in-memory store, so no port is needed. Otherwise a TCPStore at
    MASTER_ADDR:MASTER_PORT, made here rather than inside init_process_group so that a master
    that cannot be reached, or a port in use, ends in one line (``explain_distributed_error``)
    instead of torch's log of every retry; without libuv where torch lacks it (USE_LIBUV=0).

    Where torchrun's agent (or --spawn's parent) hosts the store, it outlives the workers it
    restarts (``--max-restarts``), and torch's default keys for the process group are the same
    in every attempt: restarted workers could read the addresses their dead predecessors left
    there, and gloo fails in ``connectFullMesh`` or waits for keys that never change. So every
    attempt gets keys of its own, prefixed with how many times this rank has started: all
    processes restart together, so that count is the same in every process of an attempt, on
    every machine (TORCHELASTIC_RESTART_COUNT is not: pytorch/pytorch#135712).
    """
    if launch.master is None:
        return dist.HashStore()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # rank 0 hosts a fresh store in each attempt: nothing stale to read
        return tcp_store(launch, is_master=launch.rank == 0, timeout=timeout)
    store = tcp_store(launch, is_master=False, timeout=timeout)  # torchrun's agent's
    starts = store.add(f"a08/starts/rank{launch.rank}", 1)
    return dist.PrefixStore(f"a08/attempt{starts}", store)


def tcp_store(launch: Launch, is_master: bool, timeout: timedelta) -> dist.TCPStore:
    """A TCPStore at MASTER_ADDR:MASTER_PORT; torch's C++ log of each failed connection attempt
    (a stack dump per retry) is kept off the terminal: a failure raises all the same."""
    host, port = launch.master
    with _stderr_silenced():
        return dist.TCPStore(host, port, world_size=launch.world_size, is_master=is_master,
                             timeout=timeout, use_libuv=store_uses_libuv())


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


def spawn(main: Callable[[], None], nprocs: int) -> None:
    """--spawn N: run ``main`` in N new processes on this machine, as torchrun would, but with
    torch.multiprocessing (the way the book's DDP-script.py starts its processes). This process
    hosts the store they meet through, as torchrun's agent does: a TCPStore on a free port of
    this machine, without libuv, which torch's Windows wheels lack (torch 2.2 to 2.15 take
    ``use_libuv=False`` on every system). A worker that fails has already said why; torch
    stops the others, and this process exits with its status. A signal that ends this process
    ends the workers too (``common/ending.py``)."""
    import torch.multiprocessing as mp

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=False,
                          wait_for_workers=False)
    try:
        mp.spawn(_spawned_worker, args=(nprocs, store.port, main), nprocs=nprocs)
    except mp.ProcessExitedException as err:
        raise SystemExit(err.exit_code if err.exit_code and err.exit_code > 0 else 1) from None


def _spawned_worker(index: int, nprocs: int, port: int, main: Callable[[], None]) -> None:
    """What torchrun would set, with its agent's store: the parent's, reached without libuv."""
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index),
                       "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "TORCHELASTIC_USE_AGENT_STORE": "True", "USE_LIBUV": "0"})
    run(main, DDP_ENDING)  # its errors end this worker with one line, as in the parent


def free_model_and_wait_for_gloo() -> None:
    """Call after dropping the DDP model, right before ``destroy_process_group()``.

    Collect the model first: a DDP model freed after its process group may hang or abort, as
    its reducer's hooks on the parameters still use the group. Then wait 50 ms without
    holding the GIL: gloo's worker thread may still need the GIL to free the tensors of the
    model's last operations, while torch before pytorch/pytorch#154976 (2.4.1 among them)
    destroys a gloo group holding the GIL and waiting for that thread: a deadlock
    (pytorch/pytorch#56297).
    """
    gc.collect()
    time.sleep(0.05)


def leave_process_group_after_error() -> None:
    """What a08's last line does on success, after an error: leave the process group. The
    frames of the error's traceback still hold the DDP model, so they are cleared first."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    error = sys.exc_info()[1]
    while error is not None:  # the SystemExit in flight, and the errors it replaced
        traceback.clear_frames(error.__traceback__)
        error = error.__context__
    free_model_and_wait_for_gloo()
    dist.destroy_process_group()


def explain_distributed_error(err: Exception) -> str | None:
    """One line, cause and fix, for the ways a process group fails to start or breaks down;
    None for any other error."""
    if not isinstance(err, RuntimeError):  # torch's DistError and its kin are RuntimeErrors
        return None
    message = str(err)
    launch = launch_for_messages()
    host, port = launch.master or ("?", "?")
    where = f"{host}:{port} (MASTER_ADDR:MASTER_PORT)"
    rank = f"process {launch.rank}"
    if "unsupported gloo device" in message:  # makeDeviceForHostname or ...ForInterface
        return (f"{rank}: this torch build's gloo has no network transport for this system "
                f"(reported with Windows builds of torch 2.7 to 2.12), and GLOO_SOCKET_IFNAME "
                f"cannot help: install another torch version, or run under WSL2")
    unresolved = re.search(r"Unable to find address for:? *(\S+)", message)
    if unresolved and unresolved[1] == os.environ.get("GLOO_SOCKET_IFNAME"):
        return (f"{rank}: GLOO_SOCKET_IFNAME names {unresolved[1]}, which is no network "
                f"interface with an address on this machine: set it to one that ipconfig or "
                f"ip addr lists, or unset it")
    if unresolved or "makeDeviceForHostname" in message:  # the machine's own name
        if platform.system() == "Darwin":  # a Mac's .local name often resolves to nothing
            return (f"{rank}: gloo found no network device for this Mac's hostname; on one "
                    f"machine set GLOO_SOCKET_IFNAME=lo0 (on several, the interface that "
                    f"ifconfig lists with the address the others reach, such as en0)")
        return (f"{rank}: gloo found no network device for this machine's hostname; set "
                f"GLOO_SOCKET_IFNAME to an interface's name (ipconfig or ip addr lists them)")
    if "EADDRINUSE" in message or "address already in use" in message.lower():
        return (f"{rank}: the port of {where} is already in use (another run?); choose a free "
                f"one with torchrun --master_port=PORT, or use torchrun --standalone")
    if "shared memory segment" in message:  # NCCL under WSL2 or in a container
        return (f"{rank}: NCCL could not create its shared memory in /dev/shm (WSL2 and "
                f"containers keep it small): set NCCL_SHM_DISABLE=1 (between consumer GPUs "
                f"also NCCL_P2P_DISABLE=1); NCCL_DEBUG=INFO shows more")
    if dist.is_available() and dist.is_initialized():
        if any(sign in message for sign in ("Connection closed by peer", "Connection reset",
                                            "Broken pipe", "Timed out", "timed out",
                                            "Connection refused")):
            nccl = ("; on NCCL, a hang between GPUs whose driver forbids peer-to-peer "
                    "copies (consumer cards) goes with NCCL_P2P_DISABLE=1, and NCCL_DEBUG=INFO "
                    "shows where it stops" if dist.get_backend() == "nccl" else "")
            return (f"{rank} lost contact with another process (it crashed, was killed, or "
                    f"hangs). With --max-restarts=3, torchrun restarts all processes; with "
                    f"--snapshot PATH they, or the same command run again, resume from the "
                    f"last epoch{nccl}")
        return None
    if joined := re.search(r"waiting for clients\. (\d+)/(\d+) clients joined", message):
        return (f"{rank} waited --timeout for the other processes at {where}, and only "
                f"{joined[1]} of {joined[2]} joined: start all of them (one torchrun starts "
                f"them together; with one per machine, start every machine's), or give them "
                f"longer with --timeout")
    if isinstance(err, dist.DistError) or "connect" in message:
        return (f"{rank} could not join the process group at {where} within --timeout: check "
                f"that the first machine's torchrun runs, the address and port, that no "
                f"firewall blocks the port, and on several machines GLOO_SOCKET_IFNAME (README: "
                f"Several machines)")
    return None


DDP_ENDING = Ending(explain=explain_distributed_error,
                    cleanup=leave_process_group_after_error,
                    stopped_hint="; with --snapshot, the same command resumes from the last epoch")
