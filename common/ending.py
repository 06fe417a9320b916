"""How a run ends on a signal, from a script's first line to its last: the companion's
machinery, not the tutorial's. ``common/startup.py`` installs it before torch loads, and only
where one of the scripts is the program: a notebook's kernel, pytest and anything else that
imports ``common`` keep Python's own Ctrl-C (``cli.run`` then says the same line).

- Ctrl-C (SIGINT) or SIGTERM, to any one process, at any moment (torch loading, training,
  waiting inside torch for a peer, tearing down): the process that speaks for the run writes
  one line, and the process ends at once with 130 or 143. No Python handler raises, because
  Python runs one only between bytecodes of the main thread, which may wait in C++ for minutes.
  Python also writes each signal's number to a "wakeup" socket, from C and at once: a thread
  here reads it and ends the process. Ending at once loses nothing: files are written under a
  temporary name and renamed when whole (``checkpoint.atomic_path``), and the kernel releases
  the sockets, the snapshot's lock and the memory. (A socket, not a pipe: Windows wants one.)
- A second signal finds the process gone.
- Who speaks: rank 0 under torchrun, or the one process; never a process that a script started
  (the workers of ``--spawn``, whose parent speaks, or DataLoader's).
- A launcher that dies without passing a signal on (kill -9 of torchrun, the out-of-memory
  killer): on Linux the kernel then sends each worker SIGTERM (``PR_SET_PDEATHSIG``, asked
  here), which ends it as above; torch.multiprocessing.spawn asks the same for ``--spawn``'s
  workers (with SIGINT), and a parent that a signal ends sends them SIGTERM itself. macOS has
  no such call: there the same thread looks at the worker's parent twice a second. Windows
  never changes a process's recorded parent, so an orphan there runs on until it next needs
  its peers.
- A process that a script forks (DataLoader's workers on Linux) gets Python's own handlers
  back, so that a signal sent to it does not reach this thread through the shared socket.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import select
import signal
import socket
import threading

INTERRUPTED = "Interrupted (Ctrl-C): stopped before the end; files already written are whole."
STOPPED = "Stopped (SIGTERM, e.g. a preempted job): files already written are whole"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_SECONDS = 0.5  # where the kernel cannot say that the parent died (macOS)

stopped_hint = ""  # what a script adds to the SIGTERM line (a08: how to resume); cli.run sets it
_said = threading.Lock()
_stderr = 2  # the terminal's stderr, kept (a08 points descriptor 2 elsewhere while it waits)


def started_by_a_script() -> bool:
    """A process that multiprocessing started for a script (--spawn's workers, named
    SpawnProcess-N by torch.multiprocessing; DataLoader's where it spawns)."""
    return multiprocessing.current_process().name != "MainProcess"


def speaks_for_the_run() -> bool:
    """Rank 0 under torchrun, or the one process: not a process that a script started."""
    return not started_by_a_script() and os.environ.get("RANK", "0") == "0"


def say(signum: int) -> None:
    """The line for ``signum``, once per process, where this process speaks for the run."""
    if _said.acquire(blocking=False) and speaks_for_the_run():
        line = INTERRUPTED if signum == signal.SIGINT else f"{STOPPED}{stopped_hint}."
        with contextlib.suppress(OSError):
            os.write(_stderr, f"\n{line}\n".encode())


def end(signum: int) -> None:
    """Say the line and end this process at once, with the status a shell shows for it. Its
    children (``--spawn``'s workers) get SIGTERM first: one still starting has not yet asked
    for its parent's death to reach it."""
    say(signum)
    for child in multiprocessing.active_children():
        child.terminate()
    os._exit(128 + signum)


def install() -> None:
    """On the main thread of a script, before torch loads."""
    global _stderr
    _stderr = os.dup(2)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _wake_only)
    launched = "RANK" in os.environ or started_by_a_script()
    poll = POLL_SECONDS if launched and not _parent_death_signal() else None
    threading.Thread(target=_watch, args=(reader, writer, os.getppid(), poll), daemon=True,
                     name="ending").start()
    os.register_at_fork(after_in_child=_python_handlers)


def _wake_only(signum: int, frame: object) -> None:
    """Nothing in Python: the wakeup socket has the signal already."""


def _watch(reader: socket.socket, writer: socket.socket, parent: int,
           poll: float | None) -> None:
    while True:
        if select.select([reader], [], [], poll)[0]:
            signum = reader.recv(1)[0]
            if signum in (signal.SIGINT, signal.SIGTERM):
                end(signum)
        elif os.getppid() != parent:  # where polled: the launcher died, as SIGTERM would say
            end(signal.SIGTERM)


def _parent_death_signal() -> bool:
    """Linux: ask the kernel for SIGTERM when this process's parent ends; False where libc
    has no prctl (macOS, Windows)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, TypeError):
        return False
    return prctl(PR_SET_PDEATHSIG, signal.SIGTERM) == 0


def _python_handlers() -> None:
    with contextlib.suppress(ValueError):  # not forked from the main thread: nothing to undo
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
