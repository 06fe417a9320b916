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
- A launcher that died before its worker could ask for that signal is invisible to the kernel's
  call: the worker then compares its parent with its launcher, and ends at once where the two
  differ (torchrun's workers as this is installed, by the parent's command line; ``--spawn``'s
  once multiprocessing has said who their parent is: ``end_if_orphaned``).
- A signal to one of ``--spawn``'s workers is passed to their parent, which speaks and ends
  them all, as if it had been sent the signal itself: the worker waits for that (a few seconds
  at most), so that its peers never see it vanish and report a crash.
- A file being written when the signal comes: its temporary copy is removed first
  (``remove_if_stopped``); the file it would replace stays whole.
- What a script adds to the stop line (a08: how to resume) it says once, with
  ``add_to_stop_line``.
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
from collections.abc import Iterator
from pathlib import Path

INTERRUPTED = "Interrupted (Ctrl-C): stopped before the end; files already written are whole."
STOPPED = "Stopped (SIGTERM, e.g. a preempted job): files already written are whole"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_SECONDS = 0.5  # where the kernel cannot say that the parent died (macOS)
LAUNCHER_GRACE_SECONDS = 5  # a --spawn worker's wait for the parent it passed a signal to
TORCHRUN_NAMES = (b"torchrun", b"torch.distributed.run", b"torch.distributed.launch")

# This module's own state, changed only by its functions (as atexit keeps its list):
_stop_line_additions: list[str] = []  # add_to_stop_line
_remove_when_stopped: set[str] = set()  # remove_if_stopped
_launcher: int | None = None  # --spawn's parent, once end_if_orphaned has checked it
_starting_children = threading.Lock()  # held by starting_children
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
        additions = "".join(_stop_line_additions)
        line = INTERRUPTED if signum == signal.SIGINT else f"{STOPPED}{additions}."
        with contextlib.suppress(OSError):
            os.write(_stderr, f"\n{line}\n".encode())


def add_to_stop_line(text: str) -> None:
    """``text`` ends the SIGTERM line from now on (a08: "; with --snapshot, ..."), once."""
    if text not in _stop_line_additions:
        _stop_line_additions.append(text)


@contextlib.contextmanager
def remove_if_stopped(path: str) -> Iterator[None]:
    """Within the block, a signal that ends this process removes ``path`` first (a temporary
    file being written, which the block creates; a name not yet made, or already renamed, is
    no matter)."""
    _remove_when_stopped.add(path)
    try:
        yield
    finally:
        _remove_when_stopped.discard(path)


@contextlib.contextmanager
def starting_children() -> Iterator[None]:
    """Within the block, which starts processes, a signal ends this one only once the block is
    done: multiprocessing lists a child only after handing it what it needs to run, and a child
    left unlisted and unfed fails with a traceback of its own ("EOFError: Ran out of input")."""
    with _starting_children:
        yield


def end(signum: int) -> None:
    """Say the line and end this process at once, with the status a shell shows for it, after
    removing the temporary files being written. Its children (``--spawn``'s workers) get
    SIGTERM first: one still starting has not yet asked for its parent's death to reach it."""
    say(signum)
    for path in list(_remove_when_stopped):
        with contextlib.suppress(OSError):
            os.remove(path)
    with _starting_children:
        for child in multiprocessing.active_children():
            child.terminate()
    os._exit(128 + signum)


def end_if_orphaned(launcher: int) -> None:
    """For a worker whose launcher is ``launcher`` (a pid): end now if another process has
    adopted it already (the launcher died before the kernel could be asked to say so);
    otherwise a signal to this worker is passed to the launcher from now on (--spawn)."""
    global _launcher
    if os.getppid() != launcher:
        end(signal.SIGTERM)
    if os.name == "posix":  # Windows has no signal to pass on: its os.kill terminates
        _launcher = launcher


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
    if _torchrun_gone():
        end(signal.SIGTERM)
    threading.Thread(target=_watch, args=(reader, writer, os.getppid(), poll), daemon=True,
                     name="ending").start()
    os.register_at_fork(after_in_child=_python_handlers)


def _wake_only(signum: int, frame: object) -> None:
    """Nothing in Python: the wakeup socket has the signal already."""


def _watch(reader: socket.socket, writer: socket.socket, parent: int,
           poll: float | None) -> None:
    """Ends the process on a signal (``writer``: kept open here, for Python to write to)."""
    passed_on = None  # the signal handed to --spawn's parent, which ends this worker
    while True:
        if select.select([reader], [], [], LAUNCHER_GRACE_SECONDS if passed_on else poll)[0]:
            signum = reader.recv(1)[0]
            if signum not in (signal.SIGINT, signal.SIGTERM):
                continue
            if passed_on is None and _launcher is not None and os.getppid() == _launcher:
                os.kill(_launcher, signum)
                passed_on = signum
            else:
                end(signum)
        elif passed_on is not None:  # the parent did not end this worker in time
            end(passed_on)
        elif os.getppid() != parent:  # where polled: the launcher died, as SIGTERM would say
            end(signal.SIGTERM)


def _torchrun_gone() -> bool:
    """A worker of torchrun's whose parent is no torchrun: the agent died before this worker
    asked for its death signal, and another process adopted it. torchrun gives its workers
    nothing that names the agent (TORCHELASTIC_RUN_ID says only that one started them), so
    the parent is asked for its command line: from /proc on Linux; elsewhere only an adoption
    by init (pid 1, as on macOS) is seen."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return False
    parent = os.getppid()
    try:
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:  # no /proc
        return parent == 1
    return not any(name in command for name in TORCHRUN_NAMES)


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
