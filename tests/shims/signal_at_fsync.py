"""Test shim: a signal (SHIM_SIGNAL, by default SIGTERM) reaches the process while it writes a
file: at its first ``os.fsync``, which ``checkpoint.atomic_path`` calls once the temporary file
is written and before renaming it. The process then waits for the signal to end it."""

import os
import signal
import time


def _signalled_fsync(fd: int) -> None:
    os.kill(os.getpid(), getattr(signal, os.environ.get("SHIM_SIGNAL", "SIGTERM")))
    time.sleep(30)


os.fsync = _signalled_fsync
