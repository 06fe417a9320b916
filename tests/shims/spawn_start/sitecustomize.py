"""Test shim: start every new process by spawn, as Python does on macOS and Windows (Linux
forks). Put this folder on PYTHONPATH."""

import multiprocessing

multiprocessing.set_start_method("spawn", force=True)
