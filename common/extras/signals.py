"""How a script ends on Ctrl-C and SIGTERM: one line, said once, within about a second, even
while torch waits inside C++ code where Python cannot raise. ``cli.run`` uses these."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from common.startup import INTERRUPTED, STOPPED


class Stopped(BaseException):
    """SIGTERM arrived: what SLURM, Kubernetes and torchrun send before they stop a job."""


GRACE_SECONDS = 1.0  # how long a signal may wait for the main thread before the watchdog acts
# Set while the main thread, which has taken the signal, waits for child processes to end
# (a08 --spawn): the watchdog then waits for it, however long, instead of ending the process
# under its children.
ENDING_CHILDREN = threading.Event()


class Interruption:
    """Says the line of a Ctrl-C or SIGTERM once, from whichever thread gets there first, to
    the terminal's stderr as it was when the script started (torch may have pointed file
    descriptor 2 elsewhere for a moment, as a08 does while it waits for its peers)."""

    def __init__(self, reports: Callable[[], bool], stopped_hint: str) -> None:
        self.reports = reports  # whether this process is the one to say it
        self.stopped_hint = stopped_hint
        self.said = threading.Lock()
        sys.stderr.flush()
        self.stderr = os.dup(2)

    def say(self, signum: int) -> None:
        if not self.said.acquire(blocking=False) or not self.reports():
            return
        line = (INTERRUPTED if signum == signal.SIGINT
                else STOPPED + self.stopped_hint + ".")
        sys.stderr.flush()
        os.write(self.stderr, f"\n{line}\n".encode())

    def close(self) -> None:
        os.close(self.stderr)


class SignalWatchdog:
    """Python runs a signal handler only between bytecodes of the main thread; while torch
    waits inside C++ (for peers to join, in a collective, at exit) Ctrl-C and SIGTERM would
    wait too, up to --timeout. Python also writes every signal's number to a "wakeup" socket,
    at once, from C: this thread reads it, and if the main thread has not ended within
    GRACE_SECONDS, says the usual line and ends the process itself. (A socket pair, not a
    pipe: on Windows the wakeup file descriptor must be a socket.)"""

    def __init__(self, interruption: Interruption, previous_handlers: dict[int, Any]) -> None:
        self.interruption = interruption
        self.finished = threading.Event()
        self.previous_handlers = previous_handlers
        self.sigterm_arrived = False
        self.reader, self.writer = socket.socketpair()
        self.writer.setblocking(False)
        self.previous_wakeup = signal.set_wakeup_fd(self.writer.fileno(),
                                                    warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._watch, name="signal-watchdog", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, interruption: Interruption) -> SignalWatchdog | None:
        """Only on the main thread (the only one that may set signal handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        watchdog = cls(interruption, {signum: signal.getsignal(signum)
                                      for signum in (signal.SIGINT, signal.SIGTERM)})
        # Ctrl-C raises KeyboardInterrupt (what it does before startup.py changes it)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, watchdog._on_sigterm)
        return watchdog

    def ending(self) -> None:
        """The script is ending (its cleanup may run in C++ for a while): a second Ctrl-C or
        SIGTERM no longer raises in it (a traceback from the teardown) but reaches only this
        thread, which ends the process GRACE_SECONDS later if the script has not ended."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _wake_the_watchdog_only)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.sigterm_arrived = True
        raise Stopped

    def _watch(self) -> None:
        while True:
            received = self.reader.recv(1)
            if not received or received[0] == 0:  # stop() wrote 0: the script is over
                return
            signum = received[0]
            if signum not in (signal.SIGINT, signal.SIGTERM):
                continue
            if self.finished.wait(GRACE_SECONDS):  # the main thread ended the usual way
                return
            while ENDING_CHILDREN.is_set():
                if self.finished.wait(0.1):
                    return
            self.interruption.say(signum)
            sys.stdout.flush()
            os._exit(130 if signum == signal.SIGINT else 143)

    def stop(self) -> None:
        """Back as it was: run() may be called from a longer-lived program (the tests)."""
        signal.set_wakeup_fd(self.previous_wakeup)
        for signum, handler in self.previous_handlers.items():
            signal.signal(signum, handler)
        self.finished.set()
        self.writer.send(b"\0")
        self.thread.join()
        self.reader.close()
        self.writer.close()


def _wake_the_watchdog_only(signum: int, frame: Any) -> None:
    """A Python handler that does nothing: Python still writes the signal to the wakeup socket."""


class OrphanWatch:
    """A worker whose launcher died without passing a signal on (torchrun or a08 --spawn
    killed with SIGKILL, or by the out-of-memory killer) is adopted by another process and
    would train on, holding its snapshot's lock. This thread notices the new parent, runs
    ``on_orphaned`` (tidying what the launcher would have), and sends this process SIGTERM: it
    stops as on a preemption. ``parent``: the launcher's process ID, as this process saw it
    when it started (torchrun may die while the worker still loads torch). (POSIX; on Windows a
    process's recorded parent never changes.)"""

    def __init__(self, on_orphaned: Callable[[], None], parent: int,
                 poll_seconds: float = 0.5) -> None:
        self.parent = parent
        self.on_orphaned = on_orphaned
        self.poll_seconds = poll_seconds
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="orphan-watch", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.finished.wait(self.poll_seconds):
            if self.orphaned():
                os.kill(os.getpid(), signal.SIGTERM)  # on_orphaned runs in stop()
                return

    def orphaned(self) -> bool:
        return os.getppid() != self.parent

    def stop(self) -> None:
        """At the script's end, however it came (this thread's SIGTERM, or another signal
        sent at the launcher's death: torch's --spawn workers get SIGINT)."""
        self.finished.set()
        self.thread.join()
        if self.orphaned():
            self.on_orphaned()
