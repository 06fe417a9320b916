"""How a08's processes meet and part: the store they meet through, --spawn, one line for a
process group that cannot start or breaks down, and leaving the group (``DDP_ENDING``)."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import platform
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from common import ending
from common.extras.cli import Ending, run
from common.extras.launcher import Launch, launch_for_messages
from common.extras.old_torch import device_id, store_uses_libuv

import torch
import torch.distributed as dist


def process_group_options(device: torch.device, launch: Launch,
                          timeout: timedelta) -> dict:
    """``init_process_group``'s arguments beyond the text's: --timeout (a lost peer ends the
    run instead of a hang), this attempt's store, and on CUDA the GPU (``old_torch.device_id``)."""
    return {"timeout": timeout, "store": store_for_this_attempt(launch, timeout),
            **device_id(device)}


def store_for_this_attempt(launch: Launch, timeout: timedelta) -> dist.Store:
    """One plain process: an in-memory store (no port). Otherwise a TCPStore at MASTER_ADDR:
    MASTER_PORT, made here so that an unreachable master or a port in use is one line
    (``explain_distributed_error``), not torch's log of every retry.

    A store that torchrun's agent (or --spawn's parent) hosts outlives the workers it restarts
    (``--max-restarts``), and the process group's keys are the same in every attempt: restarted
    workers would read what their dead predecessors left (gloo: ``connectFullMesh`` fails, or
    waits). So each attempt's keys are prefixed with how many times this rank has started, a
    count the same in every process of an attempt (TORCHELASTIC_RESTART_COUNT is not:
    pytorch/pytorch#135712)."""
    if launch.master is None:
        return dist.HashStore()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        # rank 0 hosts a fresh store in each attempt: nothing stale to read
        return tcp_store(launch, is_master=launch.rank == 0, timeout=timeout)
    store = tcp_store(launch, is_master=False, timeout=timeout)  # torchrun's agent's
    starts = store.add(f"a08/starts/rank{launch.rank}", 1)
    return dist.PrefixStore(f"a08/attempt{starts}", store)


def tcp_store(launch: Launch, is_master: bool, timeout: timedelta) -> dist.TCPStore:
    """A TCPStore at MASTER_ADDR:MASTER_PORT, torch's C++ stack dump per retry kept quiet."""
    host, port = launch.master
    with _stderr_silenced():
        return dist.TCPStore(host, port, world_size=launch.world_size, is_master=is_master,
                             timeout=timeout, use_libuv=store_uses_libuv())


@contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 at the null device in the block (C++ writes there, past sys.stderr)."""
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
    """--spawn N: ``main`` in N processes on this machine, started by torch.multiprocessing (as
    the book's DDP-script.py does). This process hosts their store, as torchrun's agent does:
    on a free port, without libuv, which torch's Windows wheels lack (2.2 to 2.15 take
    ``use_libuv=False`` everywhere). A worker that fails has said why; torch stops the others,
    and this process exits with its status. A worker that a signal ended before it could pass
    the signal on (``ending.end_if_orphaned``) ends the run as that signal would: one line."""
    import torch.multiprocessing as mp

    # torch's "Terminating process N via signal SIGTERM" for the others: our line says it
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=False,
                          wait_for_workers=False)
    with ending.starting_children():
        workers = mp.spawn(_spawned_worker, args=(nprocs, store.port, main), nprocs=nprocs,
                           join=False)
    try:
        while not workers.join():
            pass
    except mp.ProcessExitedException as err:
        code = err.exit_code or 1  # by a signal: minus its number
        signum = -code if code < 0 else code - 128
        if signum in (signal.SIGINT, signal.SIGTERM):
            ending.say(signum)
            code = 128 + signum
        raise SystemExit(code if code > 0 else 1) from None


def _spawned_worker(index: int, nprocs: int, port: int, main: Callable[[], None]) -> None:
    """What torchrun would set, with its agent's store: the parent's, reached without libuv.
    multiprocessing gives each worker its parent's pid, which ``ending`` checks."""
    ending.end_if_orphaned(multiprocessing.parent_process().pid)
    os.environ.update({"RANK": str(index), "LOCAL_RANK": str(index),
                       "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "TORCHELASTIC_USE_AGENT_STORE": "True", "USE_LIBUV": "0"})
    run(main, DDP_ENDING)  # its errors end this worker with one line, as in the parent


def free_model_and_wait_for_gloo() -> None:
    """After dropping the DDP model, right before ``destroy_process_group()``: collect it (a
    DDP model freed after its group may hang or abort: its reducer's hooks use the group), then
    wait 50 ms without the GIL, which gloo's worker thread may need to free the last tensors,
    while torch before pytorch/pytorch#154976 (2.4.1 too) destroys a gloo group holding the GIL
    and waiting for that thread: a deadlock (pytorch/pytorch#56297)."""
    gc.collect()
    time.sleep(0.05)


def leave_process_group_after_error() -> None:
    """a08's last line, after an error: leave the process group, once the frames of the
    error's traceback (which hold the DDP model) are cleared."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    error = sys.exc_info()[1]
    while error is not None:  # the SystemExit in flight, and the errors it replaced
        traceback.clear_frames(error.__traceback__)
        error = error.__context__
    free_model_and_wait_for_gloo()
    dist.destroy_process_group()


def explain_distributed_error(err: Exception) -> str | None:
    """One line, cause and fix, for a process group that fails to start or breaks down; None
    for any other error."""
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


DDP_ENDING = Ending(explain=explain_distributed_error, cleanup=leave_process_group_after_error)
