"""Test shim: a worker's launcher (torchrun, or a08 --spawn's parent) is killed (SIGKILL) the
moment the worker's Python starts, before its first line: the worker is adopted by another
process before it can ask the kernel for a signal at its launcher's death. Only a parent
whose command line names torchrun or a08 is killed (Linux: /proc)."""

import os
import signal
import sys
import time
from pathlib import Path

_parent = os.getppid()
_worker = "TORCHELASTIC_RUN_ID" in os.environ or "--multiprocessing-fork" in sys.argv
_command = Path(f"/proc/{_parent}/cmdline").read_bytes() if _worker else b""
if b"torch.distributed.run" in _command or b"a08_ddp_torchrun.py" in _command:
    os.kill(_parent, signal.SIGKILL)
    while os.getppid() == _parent:  # adopted
        time.sleep(0.01)
