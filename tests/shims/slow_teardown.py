"""Test shim: leaving the process group takes 5 seconds (in Python, where a signal raises),
so that a second Ctrl-C reliably comes during a08's teardown.

Named in TEST_SHIMS (see sitecustomize.py).
"""

import time

import torch.distributed as dist

_destroy = dist.destroy_process_group


def _slow_destroy(*args, **kwargs):
    time.sleep(5)
    return _destroy(*args, **kwargs)


dist.destroy_process_group = _slow_destroy
