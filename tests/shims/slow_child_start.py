"""Test shim: multiprocessing takes a second between starting a worker and handing it what it
needs to run, and creates the file SHIM_MARKER names when it is in that second (a signal then
finds a child started but not yet listed among the parent's children)."""

import os
import time
from multiprocessing import util

_spawnv_passfds = util.spawnv_passfds


def _slow_spawnv_passfds(path, args, passfds):
    pid = _spawnv_passfds(path, args, passfds)
    if "--multiprocessing-fork" in args:  # a worker, not multiprocessing's resource tracker
        with open(os.environ["SHIM_MARKER"], "a"):
            pass
        time.sleep(1)
    return pid


util.spawnv_passfds = _slow_spawnv_passfds
