"""Wall time of each script as a learner runs it, beside a bare `import torch` (median of N runs):
python tests/benchmarks/walltime.py [--repeats 5] [--markdown]"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {"python -c 'import torch'": [sys.executable, "-c", "import torch"]}
COMMANDS |= {path.name: [sys.executable, str(path)] for path in sorted(ROOT.glob("a0*.py"))}
COMMANDS["torchrun --nproc_per_node=2 a08"] = [
    sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
    str(ROOT / "a08_ddp_torchrun.py")]


def median_seconds(command: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            subprocess.run(command, cwd=folder, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="a table for the README")
    args = parser.parse_args()
    base = None
    if args.markdown:
        print("| command | wall time (s) | ratio to `import torch` |\n|---|---|---|")
    for name, command in COMMANDS.items():
        seconds = median_seconds(command, args.repeats)
        base = base or seconds
        line = (f"| {name} | {seconds:.2f} | {seconds / base:.2f}x |" if args.markdown else
                f"{name:<36} {seconds:6.2f} s  {seconds / base:5.2f}x")
        print(line, flush=True)


if __name__ == "__main__":
    main()
