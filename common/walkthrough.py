"""Every script in the tutorial's order: python -m common.walkthrough

Each runs in a fresh temporary folder (no litter); the first that fails stops the walkthrough.
a08 runs under torchrun with two processes, as section 9.3 shows it (on Windows, where torchrun
cannot start, with --spawn 2). Ctrl-C or SIGTERM stops the script, and the walkthrough."""

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from torch.distributed.elastic.utils.distributed import get_free_port

ROOT = Path(__file__).resolve().parent.parent
# at 127.0.0.1, as itself too (a Mac whose name resolves to an ip6.arpa name leaves torchrun
# looking for itself: with --standalone even so, on torch 2.4), at a free port
TORCHRUN = (f"torchrun --master_addr=127.0.0.1 --master_port={get_free_port()} "
            f"--local-addr=127.0.0.1 --nproc_per_node=2")
STEPS = [("python", path.name) for path in sorted(ROOT.glob("a0[1-7]_*.py"))] + [
    ("python", "a08_ddp_torchrun.py --spawn 2") if platform.system() == "Windows"
    else (TORCHRUN, "a08_ddp_torchrun.py")]


def main() -> int:
    argparse.ArgumentParser(description=__doc__).parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    # torchrun warns when it sets OMP_NUM_THREADS=1 itself; setting it here says the same
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for launcher, step in STEPS:
        script, *flags = step.split()
        print(f"\n##### {launcher} {step} #####", flush=True)
        runner = ["-m", "torch.distributed.run", *launcher.split()[1:]] if launcher != "python" \
            else []
        with tempfile.TemporaryDirectory() as folder:
            process = subprocess.Popen([sys.executable, *runner, str(ROOT / script), *flags],
                                       cwd=folder, env=env)
            try:
                code = process.wait()
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached the script too
                end_with_its_processes(process)
                print(f"\nWalkthrough interrupted during {script}.", file=sys.stderr)
                return 130
        if code != 0:
            print(f"\nWalkthrough stopped: {script} failed (exit status {code}). Run "
                  f"`{launcher} {step}` from the clone to see it alone.", file=sys.stderr)
            return 1
    print(f"\nWalkthrough complete: all {len(STEPS)} scripts ran.")
    return 0


def end_with_its_processes(process: subprocess.Popen) -> None:
    """The script, and every process it started: SIGINT, which torchrun and a08 pass on; on
    Windows, where a08 --spawn's workers would outlive their parent (no parent-death signal
    there) and a signal reaches only one process, taskkill of the whole tree."""
    if platform.system() == "Windows":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], capture_output=True)
    else:
        process.send_signal(signal.SIGINT)
    process.wait()


if __name__ == "__main__":
    sys.exit(main())
