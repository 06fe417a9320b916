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
import traceback
from collections.abc import Callable
from typing import Any


def _first_process() -> bool:
    """Global rank 0, or a plain process (no torchrun, no --spawn worker rank)."""
    return os.environ.get("RANK", "0") == "0"


class _Parser(argparse.ArgumentParser):
    """Under torchrun every process parses the flags: only global rank 0 prints --help and
    usage errors, so a mistyped flag gives one message rather than one per process."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if _first_process():
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


SPAWNED = "A08_SPAWN_STORE"  # set in the workers of a08 --spawn: the path of their file store


def _speaks_for_all() -> bool:
    """Whether this process reports an interruption that every process has: the first of
    them under torchrun, or the parent of a08 --spawn (not its workers)."""
    return _first_process() and SPAWNED not in os.environ


class Stopped(BaseException):
    """SIGTERM arrived: what SLURM, Kubernetes and torchrun send before they stop a job."""


_sigterm: list[int] = []  # the signal, once it arrived


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    _sigterm.append(signum)
    raise Stopped


class UserError(Exception):
    """A problem the user can fix (a bad file, a folder that cannot be written): ``run`` prints
    its message as one line, ``error: ...``, and exits with status 1."""


def run(main: Callable[[], None]) -> None:
    """Call ``main()``. Every print() becomes one whole-line write, so the lines of processes
    that share a terminal never splice (torchrun runs Python unbuffered, where print() writes
    each piece on its own). A UserError ends the script with one line, Ctrl-C at once with one
    line instead of a traceback, and a closed pipe (``| head``) quietly. SIGTERM (a preempted
    job) stops it at once with one line, exit status 143; a process group that fails to start
    or loses a peer is one line too. Whichever way main() ends, a process group it left open
    is destroyed."""
    if hasattr(sys.stdout, "reconfigure"):  # a notebook's stdout may not have it
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        previous_sigterm = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        main()
    except UserError as err:
        if _first_process():  # under torchrun every process has the error
            print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:
        if _speaks_for_all():
            print("\nInterrupted (Ctrl-C): stopped before the end; files already written are "
                  "whole.", file=sys.stderr)
        sys.exit(130)
    except (Stopped, Exception) as err:
        from common.extras.distributed import explain_distributed_error  # imports cli

        if _sigterm:  # also an error from a peer that stopped first: the signal explains it
            if _speaks_for_all():
                print("\nStopped (SIGTERM, e.g. a preempted job): files already written are "
                      "whole; with --snapshot, the same command resumes from the last epoch.",
                      file=sys.stderr)
            sys.exit(143)
        explained = explain_distributed_error(err)
        if explained is None:
            raise
        print(f"error: {explained}", file=sys.stderr)  # every process: each may differ
        sys.exit(1)
    finally:
        if on_main_thread:  # as it was: run() may be called from a longer-lived program
            signal.signal(signal.SIGTERM, previous_sigterm)
        _leave_process_group()


def _leave_process_group() -> None:
    """After an error in a08: leave the process group, as its last line does on success.

    As there, the DDP model must go first: the frames of the error's traceback still hold it,
    and a model freed after its process group may hang (it did, in 1 of 6 in-process runs)."""
    import torch.distributed as dist

    from common.extras.distributed import settle_before_leaving  # imports cli

    if not (dist.is_available() and dist.is_initialized()):
        return
    error = sys.exc_info()[1]
    while error is not None:  # the SystemExit in flight, and the error it replaced
        traceback.clear_frames(error.__traceback__)
        error = error.__context__
    settle_before_leaving()
    dist.destroy_process_group()


def positive_int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated whole numbers >= 1, e.g. 64,128,256."""
    return tuple(positive_int(part) for part in text.split(","))


def check_batch_fits(parser: argparse.ArgumentParser, batch_size: int, num_examples: int) -> None:
    """With drop_last, a batch larger than the data set would leave nothing to train on."""
    if batch_size > num_examples:
        parser.error(f"argument --batch-size: {batch_size} is larger than the "
                     f"{num_examples} training examples; use 1 to {num_examples}")
