"""Test shim: the process sends itself a signal from inside torch's import (the moment its C
extension, torch._C, is looked up), as a Ctrl-C in a script's first second would arrive.

Named in TEST_SHIMS (see sitecustomize.py), without ``cpu_only`` (which imports torch first);
SHIM_SIGNAL names the signal (default SIGINT). Imports no torch itself.
"""

import importlib.abc
import os
import signal
import sys

_SIGNAL = getattr(signal, os.environ.get("SHIM_SIGNAL", "SIGINT"))


class _SignalInTorchImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch._C":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), _SIGNAL)
        return None  # the usual finders import it


sys.meta_path.insert(0, _SignalInTorchImport())
