"""Windows' rules for the suite's own process, on Linux (SIMULATE_WINDOWS=1; conftest imports
this): subprocess refuses ``preexec_fn`` and takes ``creationflags`` (here it drops them, as
POSIX refuses them); a symbolic link needs developer mode (WinError 1314). The scripts the tests
start run as on Linux."""

import os
import subprocess

_popen_init = subprocess.Popen.__init__


def _popen_as_on_windows(self, *args, preexec_fn=None, creationflags=0, **kwargs):
    if preexec_fn is not None:
        raise ValueError("preexec_fn is not supported on Windows platforms")
    _popen_init(self, *args, **kwargs)


def _symlink_without_developer_mode(*args, **kwargs):
    raise OSError(1314, "A required privilege is not held by the client")


subprocess.Popen.__init__ = _popen_as_on_windows
os.symlink = _symlink_without_developer_mode
