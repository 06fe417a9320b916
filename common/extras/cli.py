"""Command-line helpers the scripts share: a parser that shows defaults, range-checked types,
and ``run``, which turns the ways a script can end badly into one line.

A bad value becomes argparse's usage error (exit 2) that names the flag and the allowed range,
never a traceback from deep inside torch.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common import ending as signal_ending
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


def positive_float(text: str, maximum: float = 1e38) -> float:
    """argparse type: a finite number > 0, at most ``maximum`` (by default about the largest
    a float32, the model's own type, holds)."""
    value = _in_range(float, text, minimum=0.0, what="a number > 0")
    if value == 0.0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0 (finite)")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{text!r} is too large (at most {maximum:g})")
    return value


def seed(text: str) -> int:
    """argparse type: a seed torch.manual_seed takes, 0 to 2**64 - 1."""
    return _in_range(int, text, minimum=0, what="a whole number >= 0", maximum=2**64 - 1)


def _in_range(kind: type, text: str, minimum: float, what: str,
              maximum: float | None = None) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{text!r} is too large (at most {maximum})")
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
    parser.add_argument("--seed", type=seed, default=123,
                        help="seed for torch.manual_seed (default: %(default)s)")


def heading(title: str) -> None:
    """Print a section heading; the title starts with the tutorial's section number."""
    print(f"\n=== {title} ===")


@dataclass(frozen=True)
class Ending:
    """What ``run`` does beyond its rules, for a08: ``explain`` turns its own errors into one
    line (None: not one of them); ``cleanup`` runs however main() ended, but for a signal, which
    ends the process at once (``common/ending.py``)."""

    explain: Callable[[Exception], str | None] = lambda err: None
    cleanup: Callable[[], None] = lambda: None


def run(main: Callable[[], None], ending: Ending = Ending()) -> None:
    """Call ``main()``. Every print() becomes one whole-line write, so the lines of processes
    that share a terminal never splice (torchrun runs Python unbuffered, where print() writes
    each piece on its own). A UserError ends the script with one line, a closed pipe
    (``| head``) quietly. Ctrl-C and SIGTERM: see ``common/ending.py``; where no script is
    the program (a notebook's ``%run``), Python's KeyboardInterrupt gets the same line."""
    if hasattr(sys.stdout, "reconfigure"):  # a notebook's stdout may not have it
        # a path the terminal's encoding cannot show is escaped, not a traceback after saving
        sys.stdout.reconfigure(line_buffering=True, write_through=False,
                               errors="backslashreplace")
    try:
        main()
    except UserError as err:
        if err.every_process or is_first_process():
            print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        stdout_to_null()
        sys.exit(1)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        stdout_to_null()  # it may be the full one
        print(f"error: no space left on the device ({err.filename or 'the output'}); free some "
              f"space, or write elsewhere", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        signal_ending.say(signal.SIGINT)
        sys.exit(130)
    except Exception as err:
        # torch's allocators, CPU and GPU, say "can't allocate memory" or "out of memory"
        no_memory = isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and any(
            sign in str(err) for sign in ("can't allocate memory", "out of memory")))
        explained = ("not enough memory for what the flags ask (--num-samples, --batch-size, "
                     "--sizes?); ask for less") if no_memory else ending.explain(err)
        if explained is None:
            raise
        print(f"error: {explained}", file=sys.stderr)  # every process: each may differ
        sys.exit(1)
    finally:
        ending.cleanup()


def stdout_to_null() -> None:
    """stdout, which takes no more, to the null device: Python's flush at exit then passes."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)

