"""Every script in the tutorial's order: python -m common.walkthrough

Each runs in a fresh temporary folder (a06's model.pth leaves no litter); the first that fails
stops the walkthrough with one line. a08 runs under torchrun with two processes, as section 9.3
shows it (on Windows, where torchrun cannot start, with --spawn 2). Ctrl-C or SIGTERM stops the
script that runs, and the walkthrough with it.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
STEPS = [(f"a0{n}_{name}.py", []) for n, name in enumerate(
    ["tensors", "autograd", "mlp", "dataloaders", "training_loop", "save_load", "gpu_single"], 1)]
STEPS.append(("a08_ddp_torchrun.py", ["--spawn", "2"] if platform.system() == "Windows"
              else TORCHRUN))


def command(script: str, launch: list[str]) -> list[str]:
    if launch[:1] == ["-m"]:
        return [sys.executable, *launch, str(ROOT / script)]
    return [sys.executable, str(ROOT / script), *launch]


def main() -> int:
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    # torchrun warns when it sets OMP_NUM_THREADS=1 itself; setting it here says the same
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for script, launch in STEPS:
        shown = " ".join(["torchrun --standalone --nproc_per_node=2" if launch == TORCHRUN
                          else "python", script, *([] if launch == TORCHRUN else launch)])
        print(f"\n##### {shown} #####", flush=True)
        with tempfile.TemporaryDirectory() as workdir:
            process = subprocess.Popen(command(script, launch), cwd=workdir, env=env)
            try:
                code = process.wait()
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached the script too
                process.send_signal(signal.SIGINT if os.name == "posix" else signal.SIGTERM)
                process.wait()
                print(f"\nWalkthrough interrupted during {script}.", file=sys.stderr)
                return 130
        if code != 0:
            print(f"\nWalkthrough stopped: {script} failed (exit status {code}). Run `{shown}` "
                  f"from the clone to see it alone.", file=sys.stderr)
            return 1
    print(f"\nWalkthrough complete: all {len(STEPS)} scripts ran.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
