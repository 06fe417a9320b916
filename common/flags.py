"""The companion's flags and errors, not the tutorial's: a parser whose defaults are the
tutorial's values, types that name the allowed range, and ``run``, which ends a script in one
line where the learner can fix what went wrong (exit status 2 for a flag, 1 otherwise)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

SCRIPT = re.compile(r"a0\d_\w+\.py")


class UserError(Exception):
    """A problem the learner can fix: ``run`` prints ``error: <message>`` and exits with 1."""


class Parser(argparse.ArgumentParser):
    """--help: the script's docstring first; only rank 0 prints; main() called by other code
    (a Jupyter kernel, whose argv is its own ``-f FILE``) gets the tutorial's defaults."""

    def __init__(self, doc: str | None) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)

    def parse_args(self, args=None, namespace=None):
        if args is None and not SCRIPT.fullmatch(Path(sys.argv[0]).name):
            args = []
        return super().parse_args(args, namespace)

    def _print_message(self, message, file=None):
        if os.environ.get("RANK", "0") == "0":
            super()._print_message(message, file)


def number(kind: type, low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a ``kind`` from ``low`` to ``high`` (a float: not 0 either)."""
    def parse(text: str) -> float:
        with contextlib.suppress(ValueError):
            if low <= (value := kind(text)) <= high and not (kind is float and value == 0):
                return value
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'a whole number' if kind is int else 'a number'} from {low:g} "
            f"to {high:g}{' (not 0)' if kind is float else ''}")
    return parse


POSITIVE = number(int, 1, 10**9)


def add_training_flags(parser: argparse.ArgumentParser) -> None:
    """The knobs of section 7's training loop, with the tutorial's values as defaults."""
    parser.add_argument("--epochs", type=POSITIVE, default=3,
                        help="passes over the training data (default: %(default)s)")
    parser.add_argument("--lr", type=number(float, 0, 1e38), default=0.5,  # a float32 holds it
                        help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--batch-size", type=POSITIVE, default=2,
                        help="examples per training batch (default: %(default)s)")
    parser.add_argument("--seed", type=number(int, 0, 2**64 - 1), default=123,
                        help="seed for torch.manual_seed (default: %(default)s)")


def parse_training_flags(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """a05 to a07: the flags; a batch larger than the 5 examples would leave nothing."""
    args = parser.parse_args()
    if args.batch_size > 5:
        parser.error(f"argument --batch-size: {args.batch_size} is larger than the 5 training "
                     f"examples; use 1 to 5")
    return args


def heading(title: str) -> None:
    """A section heading; the title starts with the tutorial's section number."""
    print(f"\n=== {title} ===")


def require_finite_loss(loss: float) -> float:
    """A loss that became NaN or infinite: the run diverged, so it stops before saving."""
    if loss != loss or abs(loss) == float("inf"):
        raise UserError(f"the training loss became {loss}: the weights diverged (--lr too "
                        f"large?); nothing from this epoch was saved. Try a smaller --lr (with "
                        f"--snapshot, and another path: the file holds this --lr)")
    return loss


def run(main: Callable[[], None]) -> None:
    """``main()`` as the program: Ctrl-C ends it at once, as SIGTERM does (Python's own Ctrl-C
    waits for a bytecode, none while torch waits in C++ for a peer); not in a notebook's %run."""
    if any(SCRIPT.fullmatch(Path(arg).name) for arg in sys.orig_argv[1:3]):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(sys.stdout, "reconfigure"):  # whole lines: processes' output never splices
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    try:
        main()
    except UserError as err:
        fail(str(err))
    except (dist.DistError, RuntimeError) as err:  # a process group that cannot start, or
        if not isinstance(err, dist.DistError) and "/gloo/" not in str(err):  # loses a peer
            raise  # (gloo's are RuntimeErrors that name its source file)
        fail(f"process {os.environ.get('RANK', 0)}: {words(err)} (README: When things go "
             f"wrong)", every_process=True)
    except BrokenPipeError:  # piped into `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def words(err: BaseException) -> str:
    """An error's own first sentence, without the C++ source file some put first."""
    text = str(err).strip().split("] ", 1)[-1] if str(err).startswith("[") else str(err)
    return (text.strip().splitlines() or [type(err).__name__])[0].split(". ")[0].rstrip(".")


def fail(message: str, every_process: bool = False) -> None:
    """``error: message`` from rank 0 (or each), exit 1: at once within a process group."""
    if every_process or os.environ.get("RANK", "0") == "0" or not dist.is_initialized():
        print(f"error: {message}", file=sys.stderr)
    if dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(1)
