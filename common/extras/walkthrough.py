"""Every script in the tutorial's order: python -m common.extras.walkthrough

Each runs in a fresh temporary folder (a06's model.pth leaves no litter), its output passed on
line by line; the first that fails stops the walkthrough with one line. a08 runs under
torchrun with two processes, as section 9.3 shows it (--spawn 2 on Windows, where torchrun
cannot start). Ctrl-C or SIGTERM stops the script and ends the walkthrough with one line
(torchrun's own log of it is not passed on).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile

from common.extras.cli import stdout_to_null
from common.extras.launcher import torchrun_command
from common.startup import ROOT

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
    previous_sigterm = signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    try:
        return run_steps()
    except BrokenPipeError:  # piped into e.g. `head`, which stopped reading
        stdout_to_null()
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)


def run_steps() -> int:
    """Each step in turn: 0 once all ran, 1 at the first that fails, 130 on Ctrl-C."""
    for script, nproc, arguments in STEPS:
        try:
            returncode, shown = run_step(script, nproc, arguments)
        except KeyboardInterrupt:
            print(f"\nWalkthrough interrupted during {script}.", file=sys.stderr)
            return 130
        if returncode != 0:
            print(f"\nWalkthrough stopped: {script} failed (exit status {returncode}). "
                  f"Run `{shown}` from the repository to see it alone.", file=sys.stderr)
            return 1
    print(f"\nWalkthrough complete: all {len(STEPS)} scripts ran.")
    return 0


def run_step(script: str, nproc: int | None, arguments: list[str]) -> tuple[int, str]:
    """Run one script as the tutorial shows it: (its exit status, its command as shown)."""
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
        return run_passing_output_on(command, workdir, env if nproc else None), shown


def run_passing_output_on(command: list[str], workdir: str, env: dict | None) -> int:
    """Run ``command`` in its own session (a Ctrl-C at the terminal reaches only this process),
    passing its output on line by line, standard error with it. On Ctrl-C or SIGTERM: stop the
    command (SIGINT, as the terminal would; torchrun passes it on) and raise KeyboardInterrupt
    once it has ended. A reader that stops (``| head``) ends the passing on, not the reading."""
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    passing_on = True
    try:
        for line in process.stdout:
            if passing_on:
                try:
                    sys.stdout.buffer.write(line)
                    sys.stdout.buffer.flush()
                except BrokenPipeError:
                    passing_on = False
    except KeyboardInterrupt:
        _stop(process)
        raise
    if not passing_on:
        raise BrokenPipeError
    return process.wait()


def _stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    if os.name == "posix":
        process.send_signal(signal.SIGINT)
    else:
        process.terminate()
    try:
        process.communicate(timeout=grace)  # its last words, not passed on
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


if __name__ == "__main__":
    sys.exit(main())
