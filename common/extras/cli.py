"""Command-line helpers the scripts share: a parser that shows defaults, range-checked types,
and ``run``, which turns the ways a script can end badly into one line.

A bad value becomes argparse's usage error (exit 2) that names the flag and the allowed range,
never a traceback from deep inside torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.extras.errors import UserError
from common.extras.launcher import is_first_process


class _Parser(argparse.ArgumentParser):
    """Under torchrun every process parses the flags: only global rank 0 prints --help and
    usage errors, so a mistyped flag gives one message rather than one per process."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if is_first_process():
            super()._print_message(message, file)


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose --help starts with the script's docstring (which names its section)."""
    return _Parser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    return _in_range(int, text, minimum=1, what="a whole number >= 1")


def nonnegative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _in_range(int, text, minimum=0, what="a whole number >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _in_range(float, text, minimum=0.0, what="a number > 0")
    if value == 0.0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0 (finite)")
    return value


def _in_range(kind: type, text: str, minimum: float, what: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def positive_int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated whole numbers >= 1, e.g. 64,128,256."""
    return tuple(positive_int(part) for part in text.split(","))


def add_training_flags(parser: argparse.ArgumentParser) -> None:
    """The knobs of section 7's training loop, with the tutorial's values as defaults."""
    parser.add_argument("--epochs", type=positive_int, default=3,
                        help="passes over the training data (default: %(default)s)")
    parser.add_argument("--lr", type=positive_float, default=0.5,
                        help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--batch-size", type=positive_int, default=2,
                        help="examples per training batch (default: %(default)s)")
    parser.add_argument("--seed", type=nonnegative_int, default=123,
                        help="seed for torch.manual_seed (default: %(default)s)")


def heading(title: str) -> None:
    """Print a section heading; the title starts with the tutorial's section number."""
    print(f"\n=== {title} ===")


def _no_explanation(err: Exception) -> str | None:
    return None


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Ending:
    """What ``run`` does beyond its general rules, for a script that needs more (a08 gives
    its own): ``explain`` turns errors of the script's own kind into one line (None: not
    one of them); ``reports_interruptions`` says whether this process prints the Ctrl-C and
    SIGTERM line that every process would print; ``cleanup`` runs however main() ended;
    ``stopped_hint`` ends the SIGTERM line."""

    explain: Callable[[Exception], str | None] = _no_explanation
    reports_interruptions: Callable[[], bool] = is_first_process
    cleanup: Callable[[], None] = _nothing
    stopped_hint: str = ""


class Stopped(BaseException):
    """SIGTERM arrived: what SLURM, Kubernetes and torchrun send before they stop a job."""


INTERRUPTED = "Interrupted (Ctrl-C): stopped before the end; files already written are whole."
STOPPED = "Stopped (SIGTERM, e.g. a preempted job): files already written are whole"
GRACE_SECONDS = 1.0  # how long a signal may wait for the main thread before the watchdog acts


def run(main: Callable[[], None], ending: Ending = Ending()) -> None:
    """Call ``main()``. Every print() becomes one whole-line write, so the lines of processes
    that share a terminal never splice (torchrun runs Python unbuffered, where print() writes
    each piece on its own). A UserError ends the script with one line, a closed pipe
    (``| head``) quietly. Ctrl-C (exit 130) and SIGTERM (a preempted job, exit 143) end it
    with one line, within about a second even while torch waits inside C++ code, where Python
    cannot raise (see ``_SignalWatchdog``)."""
    if hasattr(sys.stdout, "reconfigure"):  # a notebook's stdout may not have it
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    said = threading.Lock()  # the interruption's line is said once, by the first to get here
    watchdog = _SignalWatchdog.start(ending, said)
    try:
        main()
    except UserError as err:
        if err.every_process or is_first_process():
            print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:
        _say_interrupted(signal.SIGINT, ending, said)
        sys.exit(130)
    except (Stopped, Exception) as err:
        if watchdog and watchdog.sigterm_arrived:  # also a peer's error: it stopped first
            _say_interrupted(signal.SIGTERM, ending, said)
            sys.exit(143)
        explained = ending.explain(err) if isinstance(err, Exception) else None
        if explained is None:
            raise
        print(f"error: {explained}", file=sys.stderr)  # every process: each may differ
        sys.exit(1)
    finally:
        try:
            ending.cleanup()  # may wait in C++ too: the watchdog still watches
        finally:
            if watchdog:
                watchdog.stop()


def _say_interrupted(signum: int, ending: Ending, said: threading.Lock) -> None:
    if said.acquire(blocking=False) and ending.reports_interruptions():
        line = INTERRUPTED if signum == signal.SIGINT else STOPPED + ending.stopped_hint + "."
        print(f"\n{line}", file=sys.stderr, flush=True)


class _SignalWatchdog:
    """Python runs a signal handler only between bytecodes of the main thread; while torch
    waits inside C++ (for peers to join, in a collective, at exit) Ctrl-C and SIGTERM would
    wait too, up to --timeout. Python also writes every signal's number to a "wakeup" pipe,
    at once, from C: this thread reads it, and if the main thread has not ended within
    GRACE_SECONDS, says the usual line and ends the process itself."""

    def __init__(self, ending: Ending, said: threading.Lock, previous_sigterm: Any) -> None:
        self.ending = ending
        self.said = said
        self.finished = threading.Event()
        self.previous_sigterm = previous_sigterm
        self.sigterm_arrived = False
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self.previous_wakeup = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._watch, name="signal-watchdog", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, ending: Ending, said: threading.Lock) -> _SignalWatchdog | None:
        """Only on the main thread (the only one that may set signal handlers)."""
        if threading.current_thread() is not threading.main_thread():
            return None
        watchdog = cls(ending, said, signal.getsignal(signal.SIGTERM))
        signal.signal(signal.SIGTERM, watchdog._on_sigterm)
        return watchdog

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.sigterm_arrived = True
        raise Stopped

    def _watch(self) -> None:
        while True:
            received = os.read(self.read_fd, 1)
            if not received or received[0] == 0:  # stop() wrote 0: the script is over
                return
            signum = received[0]
            if signum not in (signal.SIGINT, signal.SIGTERM):
                continue
            if self.finished.wait(GRACE_SECONDS):  # the main thread ended the usual way
                return
            _say_interrupted(signum, self.ending, self.said)
            sys.stdout.flush()
            os._exit(130 if signum == signal.SIGINT else 143)

    def stop(self) -> None:
        """Back as it was: run() may be called from a longer-lived program (the tests)."""
        signal.set_wakeup_fd(self.previous_wakeup)
        signal.signal(signal.SIGTERM, self.previous_sigterm)
        self.finished.set()
        os.write(self.write_fd, b"\0")
        self.thread.join()
        os.close(self.read_fd)
        os.close(self.write_fd)
