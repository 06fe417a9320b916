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

ROOT = Path(__file__).resolve().parent.parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
# torch's Windows wheels lack libuv, which torchrun's own store needs: there, a08 starts the same
# two processes itself (--spawn 2), without torchrun
A08_LAUNCH = ([], ["--spawn", "2"]) if platform.system() == "Windows" else (TORCHRUN, [])
STEPS = [  # (script, launcher before it, arguments after it)
    ("a01_tensors.py", [], []),
    ("a02_autograd.py", [], []),
    ("a03_mlp.py", [], []),
    ("a04_dataloaders.py", [], []),
    ("a05_training_loop.py", [], []),
    ("a06_save_load.py", [], []),
    ("a07_gpu_single.py", [], []),
    ("a08_ddp_torchrun.py", *A08_LAUNCH),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()
    for script, launcher, arguments in STEPS:
        command = (launcher or [sys.executable]) + [str(ROOT / script), *arguments]
        shown = " ".join(["torchrun --standalone --nproc_per_node=2" if launcher else "python",
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
                                            env=env if launcher else None).returncode
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
