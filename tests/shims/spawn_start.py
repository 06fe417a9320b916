"""Test shim: start every new process by spawn, as Python does on macOS and Windows (Linux
forks). Named in TEST_SHIMS (see sitecustomize.py)."""

import multiprocessing

multiprocessing.set_start_method("spawn", force=True)
