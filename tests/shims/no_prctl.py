"""Test shim: a C library without ``prctl``, as on macOS (and Windows): a worker cannot ask
the kernel for a signal when its launcher dies, so common/ending.py watches its parent instead.
Libraries loaded by path (torch's own) load as usual."""

import ctypes

_CDLL = ctypes.CDLL


class _LibcWithoutPrctl(_CDLL):
    def __getattr__(self, name):
        if name == "prctl":
            raise AttributeError(name)
        return super().__getattr__(name)


def _cdll(name, *args, **kwargs):
    return (_LibcWithoutPrctl if name is None else _CDLL)(name, *args, **kwargs)


ctypes.CDLL = _cdll
