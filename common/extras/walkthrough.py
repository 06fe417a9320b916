"""Run the whole companion in the tutorial's order: python -m common.extras.walkthrough

Each script runs in a fresh temporary folder (so a06's model.pth leaves no litter) and prints
straight to the terminal; the walkthrough stops with a clear message at the first that fails.
a08 runs under torchrun with two processes, as section 9.3 shows it (on Windows, where torchrun
cannot start, with --spawn 2).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from common.extras.launcher import torchrun_command

ROOT = Path(__file__).resolve().parent.parent.parent
# torch's Windows wheels lack libuv, which torchrun's own store needs: there, a08 starts the same
# two processes itself (--spawn 2), without torchrun
A08_LAUNCH = (None, ["--spawn", "2"]) if platform.system() == "Windows" else (2, [])
STEPS = [  # (script, torchrun's --nproc_per_node or None for plain python, arguments)
    ("a01_tensors.py", None, []),
    ("a02_autograd.py", None, []),
    ("a03_mlp.py", None, []),
    ("a04_dataloaders.py", None, []),
    ("a05_training_loop.py", None, []),
    ("a06_save_load.py", None, []),
    ("a07_gpu_single.py", None, []),
    ("a08_ddp_torchrun.py", *A08_LAUNCH),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    for script, nproc, arguments in STEPS:
        if nproc:
            command = torchrun_command(nproc, str(ROOT / script), *arguments)
        else:
            command = [sys.executable, str(ROOT / script), *arguments]
        shown = " ".join([f"torchrun --standalone --nproc_per_node={nproc}" if nproc else "python",
                          script, *arguments])
        if arguments:
            print(f"\n(On Windows torchrun cannot start: torch's wheels there lack libuv. "
                  f"{script} {' '.join(arguments)} starts the processes itself.)")
        print(f"\n##### {shown} #####", flush=True)
        # torchrun warns when it sets OMP_NUM_THREADS=1 itself; setting it here says the same
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        with tempfile.TemporaryDirectory() as workdir:
            try:
                returncode = subprocess.run(command, cwd=workdir,
                                            env=env if nproc else None).returncode
            except KeyboardInterrupt:
                print(f"\nWalkthrough interrupted during {script}.", file=sys.stderr)
                return 130
        if returncode != 0:
            print(f"\nWalkthrough stopped: {script} failed (exit status {returncode}). "
                  f"Run `{shown}` from the repository to see it alone.", file=sys.stderr)
            return 1
    print(f"\nWalkthrough complete: all {len(STEPS)} scripts ran.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
