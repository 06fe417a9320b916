"""The companion's machinery, not the tutorial's: what a script needs before torch loads, which
takes a second or more (longer from a cold disk). ``common`` imports this module first, and the
scripts import ``common`` before torch, so importing it is the first thing they do. It imports
nothing of ``common.extras``, whose modules load torch:

- a standard output or error that the shell closed (``2>&-``) points at the null device, so
  that the script runs as usual, and no file it opens later takes that number and receives
  what torch writes there;
- a file of the learner's beside the scripts that would hide a package they import (a
  ``torch.py`` or ``numpy.py`` in the clone) is named in one line, before it is imported;
- what a Ctrl-C, a SIGTERM or a launcher's death does, from here to the end, is set up
  (``common/ending.py``): even during torch's import, one line instead of a traceback.

Only where one of the companion's scripts is the program that runs: a notebook, pytest or
anything else that imports ``common`` keeps its own streams and signal handling.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path

from common import ending

ROOT = Path(__file__).resolve().parent.parent  # the clone: where the scripts are
HIDEABLE_PACKAGES = ("torch", "numpy", "matplotlib")  # what the scripts import from outside


def running_a_script() -> bool:
    """This interpreter was started to run one of the aNN_*.py scripts (``python a05_...py``;
    torchrun's ``python -u a08_...py``), or multiprocessing started it for one, which it
    imports again as ``__mp_main__``. Not a program that runs a script inside itself, such
    as a Jupyter kernel's ``%run``: the kernel's interrupt button must go on raising
    KeyboardInterrupt."""
    if _a_script(getattr(sys.modules.get("__mp_main__"), "__file__", None)):
        return True
    return any(_a_script(argument) for argument in sys.orig_argv[1:])


def _a_script(path: str | None) -> bool:
    return path is not None and path.endswith(".py") and Path(path).resolve().parent == ROOT


def point_closed_streams_at_null() -> None:
    """Standard output or error closed by the shell: the null device takes its number."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 (lives as long as sys)


def file_hiding_a_package(folder: Path = ROOT) -> Path | None:
    """A module or package of the learner's in ``folder`` (first on ``sys.path`` when a script
    runs) named like one the scripts import from outside, which Python would import instead."""
    for name in HIDEABLE_PACKAGES:
        if name in sys.modules:
            continue  # already imported: whatever it is, it is too late to say
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin).resolve()
        found = origin.parent if origin.name == "__init__.py" else origin
        if found.parent == folder.resolve():
            return found
    return None


def prepare() -> None:
    point_closed_streams_at_null()
    hiding = file_hiding_a_package()
    if hiding is not None:
        print(f"error: {hiding} hides the installed {hiding.stem} package from every script "
              f"here; rename or move it", file=sys.stderr)
        sys.exit(1)
    if threading.current_thread() is threading.main_thread():
        ending.install()


if running_a_script():
    prepare()
