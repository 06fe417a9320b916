"""Test shim: this process answers as Windows does, ``platform.system()`` "Windows", once torch
has loaded (torch's own import asks it, and on Windows loads its DLLs instead); and its
``subprocess.Popen.send_signal`` takes what Windows' takes (CPython's Lib/subprocess.py, the
Windows class): SIGTERM is ``terminate()``, TerminateProcess, which no handler sees (SIGKILL
here), CTRL_C_EVENT and CTRL_BREAK_EVENT go to the console, anything else is "ValueError:
Unsupported signal". With SIMULATE_WINDOWS=1 every child of the suite gets it
(conftest.clean_env), beside no_libuv and no_parent_death_signal, so that a08's, devices' and
the walkthrough's Windows branches run. Named in TEST_SHIMS (see sitecustomize.py)."""

import os
import platform
import signal
import subprocess

import torch  # noqa: F401
from answers import answering

platform.system = answering(platform.system, "Windows")


def _send_signal_as_on_windows(self, sig):
    if self.returncode is not None:
        return
    if sig != signal.SIGTERM:  # CTRL_C_EVENT and CTRL_BREAK_EVENT exist only on Windows
        raise ValueError(f"Unsupported signal: {sig}")
    os.kill(self.pid, signal.SIGKILL)


subprocess.Popen.send_signal = _send_signal_as_on_windows
subprocess.Popen.terminate = lambda self: self.send_signal(signal.SIGTERM)
