"""Test shim: a signal sent from inside torch's import (the moment its C extension, torch._C,
is looked up): to this process, as a Ctrl-C in a script's first second would arrive, or, with
SHIM_SIGNAL_TO=parent, to its parent, as a launcher that dies while its workers load torch.

Named in TEST_SHIMS (see sitecustomize.py), without ``cpu_only`` (which imports torch first);
SHIM_SIGNAL names the signal (default SIGINT). Imports no torch itself.
"""

import importlib.abc
import os
import signal
import sys

_SIGNAL = getattr(signal, os.environ.get("SHIM_SIGNAL", "SIGINT"))
_TO_PARENT = os.environ.get("SHIM_SIGNAL_TO") == "parent"


class _SignalInTorchImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch._C":
            sys.meta_path.remove(self)
            os.kill(os.getppid() if _TO_PARENT else os.getpid(), _SIGNAL)
        return None  # the usual finders import it


sys.meta_path.insert(0, _SignalInTorchImport())
