"""How the scripts run, not the tutorial's code: ``run`` calls a script's ``main`` and ends it
in one line where the learner can fix what went wrong (exit status 1; a flag's is 2, from
``flags``); section headings."""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from collections.abc import Callable

import torch.distributed as dist

# gloo's errors start with its source file's path, as each OS's build of torch writes it:
# "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer" (Linux), or
# "[enforce fail at C:\...\third_party\gloo\gloo\transport\uv\device.cc:164] ..." (Windows)
GLOO_SOURCE = re.compile(r"[/\\]gloo[/\\]")


class UserError(Exception):
    """A problem the learner can fix: ``run`` prints ``error: <message>`` and exits with 1."""


def heading(title: str) -> None:
    """A section heading; the title starts with the tutorial's section number."""
    print(f"\n=== {title} ===")


def run(main: Callable[..., None], *args: object, **kwargs: object) -> None:
    """``main(*args, **kwargs)`` as the program: Ctrl-C ends it at once, as SIGTERM does
    (Python's own Ctrl-C waits for a bytecode, none while torch waits in C++ for a peer), where
    the interpreter's own command line names the script (not a notebook's %run)."""
    if sys.argv[0].endswith(".py") and sys.argv[0] in sys.orig_argv[1:]:  # not python -c
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    whole_lines()
    try:
        main(*args, **kwargs)
    except UserError as err:
        fail(str(err))
    except RuntimeError as err:  # a process group that cannot start, or loses a peer: torch's
        # DistError, or gloo's RuntimeError, which names its source file
        if not isinstance(err, getattr(dist, "DistError", ())) and not GLOO_SOURCE.search(str(err)):
            raise
        entry = 'see TROUBLESHOOTING.md: "error: process N"'
        fail(f"process {os.environ.get('RANK', 0)}: {lost_peer(err) or words(err)} ({entry})",
             every_process=True)
    except OSError as err:
        if not reader_gone(err):
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def whole_lines() -> None:
    """stdout and stderr each write a line at once (torchrun's PYTHONUNBUFFERED=1 makes print's
    text and its newline two writes), so that two processes' lines never splice into one."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True, write_through=False)


# gloo's words where a peer stopped answering and this process gave up after --timeout: the uv
# transport's (macOS, Windows: gloo/transport/uv/unbound_buffer.cc, waitRecv and waitSend), as
# the tcp one's where a peer hangs (Linux's, whose lost peer is "Connection closed by peer")
TIMED_OUT = re.compile(r"Timed out waiting (\d+)ms for (?:recv|send) operation to complete")


def lost_peer(err: BaseException) -> str | None:
    """gloo's timeout, said as what happened; None for any other error."""
    if not (found := TIMED_OUT.search(str(err))):
        return None
    return (f"another process stopped answering, and this one gave up after waiting "
            f"{int(found[1]) / 1000:g} s for it (--timeout; gloo: {found[0]})")


def reader_gone(err: OSError) -> bool:
    """Piped into `head` or `more`, which stopped reading: BrokenPipeError, or on Windows
    often EINVAL (python/cpython#79935), which only a second try at the pipe tells apart."""
    if isinstance(err, BrokenPipeError):
        return True
    if err.errno != errno.EINVAL:
        return False
    try:
        sys.stdout.flush()
    except OSError:
        return True
    return False


def words(err: BaseException) -> str:
    """An error's own first sentence, without the C++ source file some put first; and NCCL's
    'Last error:', which names the cause (a /dev/shm too small, in Docker)."""
    text = str(err).strip().split("] ", 1)[-1] if str(err).startswith("[") else str(err)
    first = (text.strip().splitlines() or [type(err).__name__])[0].split(". ")[0].rstrip(".")
    last = text.partition("Last error:")[2].strip().partition("\n")[0]
    return f"{first}; last error: {last}" if last else first


def in_process_group() -> bool:
    return dist.is_available() and dist.is_initialized()  # AMD's torch for Windows: no dist


def say_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def fail(message: str, every_process: bool = False) -> None:
    """``error: message`` from rank 0 (or each), exit 1: at once within a process group."""
    if every_process or os.environ.get("RANK", "0") == "0" or not in_process_group():
        say_error(message)
    if in_process_group():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    sys.exit(1)
