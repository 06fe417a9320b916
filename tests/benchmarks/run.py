"""Benchmarks of the companion on the machine at hand: a report, not a test.

    python tests/benchmarks/run.py [--markdown benchmarks.md] [--repeats 5]

1. Walkthrough: each script's wall time beside a bare `python -c "import torch"`.
2. DDP scaling: a08's loop under torchrun with N = 1, 2, 4 CPU processes (and one per GPU where
   there are GPUs) against the same loop in one plain process without DDP, over per-process
   batch sizes (training_loop.py).
3. Exercise A.4: a07's matrix-multiplication table.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from common.extras.launcher import torchrun_command  # noqa: E402
from common.extras.walkthrough import STEPS  # noqa: E402

SCRIPTS = [script for script, *_ in STEPS]  # the one list of scripts, in the tutorial's order
THROUGHPUT = re.compile(r"^Training time: ([\d.]+) s for (\d+) samples, (\d+) samples/s",
                        re.MULTILINE)


def clean_env(**extra: str) -> dict:
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def wall_time(command: list[str], cwd: str, env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env or clean_env(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def walkthrough(repeats: int) -> tuple[list[str], list[list[str]]]:
    rows = []
    with tempfile.TemporaryDirectory() as cwd:
        commands = {"python -c 'import torch'": [sys.executable, "-c", "import torch"]}
        commands.update({script: [sys.executable, str(ROOT / script)] for script in SCRIPTS})
        medians = {}
        for _ in range(repeats):  # interleaved, so that drifts in machine load hit all alike
            for name, command in commands.items():
                medians.setdefault(name, []).append(wall_time(command, cwd))
        base = statistics.median(medians["python -c 'import torch'"])
        for name, times in medians.items():
            median = statistics.median(times)
            rows.append([name, f"{median:.2f}", f"{median / base:.2f}x"])
    return ["command", f"median wall time (s), {repeats} runs", "ratio to import torch"], rows


def throughput(command: list[str], env: dict) -> float:
    """Samples/s from a08's timing line."""
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True,
                             text=True).stdout
    match = THROUGHPUT.search(out)
    if not match:
        raise RuntimeError(f"no timing line in the output of {command}")
    return float(match[3])


def side_by_side(command: list[str], env: dict) -> float:
    """Samples/s of two copies of ``command`` run at once, each on half the work: what two
    processes get from this machine when they never talk to each other (DDP's ceiling)."""
    with tempfile.TemporaryDirectory() as cwd:
        runs = [subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
                for _ in range(2)]
        outs = [run.communicate()[0] for run in runs]
    matches = [THROUGHPUT.search(out) for out in outs]
    if not all(matches) or any(run.returncode for run in runs):
        raise RuntimeError(f"side-by-side runs of {command} failed")
    return sum(int(m[2]) for m in matches) / max(float(m[1]) for m in matches)


def ddp_runs(device: str, batch: int, num_samples: int, epochs: int, counts: list[int],
             loader_flags: list[str]) -> list[tuple[str, int, Callable[[], float]]]:
    """(row name, processes, measure returning samples/s) for one device and batch size."""
    def flags(samples: int) -> list[str]:
        return ["--num-samples", str(samples), "--batch-size", str(batch), "--epochs",
                str(epochs), "--device", device, *loader_flags]
    one_thread = clean_env(OMP_NUM_THREADS="1")  # as torchrun gives each worker
    plain = [sys.executable, str(ROOT / "tests/benchmarks/training_loop.py")]
    runs = [("plain, 1 thread", 1, partial(throughput, plain + flags(num_samples), one_thread))]
    if device == "cpu":
        cores = os.cpu_count() or 1  # what a plain run gets by default: a thread on every core
        runs.append((f"plain, {cores} threads", 0, partial(
            throughput, plain + flags(num_samples), clean_env(OMP_NUM_THREADS=str(cores)))))
        runs.append(("2 plain processes side by side", 2, partial(
            side_by_side, plain + flags(num_samples // 2), one_thread)))
    for n in counts:
        torchrun = torchrun_command(n, str(ROOT / "tests/benchmarks/training_loop.py"))
        runs.append((f"DDP, N={n}", n, partial(throughput, torchrun + flags(num_samples),
                                               one_thread)))
    return runs


def ddp_scaling(batch_sizes: list[int], nprocs: list[int], min_samples: int, epochs: int,
                repeats: int, loader_flags: list[str]) -> tuple[list[str], list[list[str]], dict]:
    """Each repeat runs the plain loop and every other run straight after it; a speed-up is
    the median of the per-repeat ratios, because this machine's speed drifts by 20% over
    minutes (other virtual machines on the host), more than the differences measured."""
    import torch
    rows, speedups = [], {}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        counts = nprocs if device == "cpu" else sorted({1, torch.cuda.device_count()})
        for batch in batch_sizes:
            num_samples = max(min_samples, 64 * batch)  # at least 64 batches an epoch at N=1
            runs = ddp_runs(device, batch, num_samples, epochs, counts, loader_flags)
            rates: list[list[float]] = [[] for _ in runs]
            for _ in range(repeats):
                for (_, _, measure), values in zip(runs, rates, strict=True):
                    values.append(measure())
            for (name, n, _), values in zip(runs, rates, strict=True):
                ratios = [v / p for v, p in zip(values, rates[0], strict=True)]
                ratio = statistics.median(ratios)
                if name.startswith("DDP"):
                    speedups[(device, batch, n)] = ratio
                rows.append([device, str(batch), name, f"{statistics.median(values):.0f}",
                             f"{ratio:.2f}x", f"{min(ratios):.2f}-{max(ratios):.2f}",
                             f"{ratio / n:.0%}" if n else "-"])
    header = ["device", "batch per process", "run", "samples/s (median)",
              "speed-up vs plain, 1 thread (median ratio)", "lowest-highest ratio",
              "parallel efficiency"]
    return header, rows, speedups


def exercise_a4() -> str:
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([sys.executable, str(ROOT / "a07_gpu_single.py"), "--benchmark",
                              "--epochs", "1"], cwd=cwd, env=clean_env(), check=True,
                             capture_output=True, text=True).stdout
    start = out.index("Median time")
    return out[start:out.index("\n=== ", start)].strip()


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, {gpu}; "
            f"Python {platform.python_version()}, torch {torch.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", metavar="PATH", help="also write the report here")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--batch-sizes", default="64,1024,8192,65536",
                        help="per-process batch sizes for the DDP sweep")
    parser.add_argument("--nprocs", default="1,2,4", help="CPU process counts")
    parser.add_argument("--num-samples", type=int, default=262144,
                        help="training examples, at least (64 batches an epoch at N=1)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--only", choices=("walkthrough", "ddp", "a4"), default=None,
                        help="run one part only")
    parser.add_argument("--tutorial-loader", action="store_true",
                        help="DDP sweep with the tutorial's loader (a08's) instead of the "
                             "benchmark's (fast_loader.py)")
    args = parser.parse_args()
    loader_flags = ["--tutorial-loader"] if args.tutorial_loader else []
    loader = "the tutorial's loader" if args.tutorial_loader else "the benchmark's loader"

    parts = [f"Machine: {machine()}"]
    if args.only in (None, "walkthrough"):
        parts.append("### Walkthrough\n\n" + table(*walkthrough(args.repeats)))
        print(parts[-1], flush=True)
    if args.only in (None, "ddp"):
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
        header, rows, speedups = ddp_scaling(batch_sizes, [int(n) for n in
                                                           args.nprocs.split(",")],
                                             args.num_samples, args.epochs, args.repeats,
                                             loader_flags)
        paying = [b for b in batch_sizes if speedups.get(("cpu", b, 2), 0) > 1.0]
        verdict = (f"On the CPU, DDP with 2 processes beats the plain loop from a per-process "
                   f"batch of {min(paying)} on; below that it costs more than it buys."
                   if paying else "On the CPU, DDP with 2 processes never beat the plain loop.")
        parts.append(f"### DDP scaling (max({args.num_samples}, 64 x batch) examples, "
                     f"{args.epochs} epochs, {loader})\n\n"
                     + table(header, rows) + "\n\n" + verdict)
        print(parts[-1], flush=True)
    if args.only in (None, "a4"):
        parts.append("### Exercise A.4\n\n```\n" + exercise_a4() + "\n```")
        print(parts[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
