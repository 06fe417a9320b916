"""Benchmarks of the companion on the machine at hand: a report, not a test.

    python tests/benchmarks/run.py [--markdown benchmarks.md] [--repeats 5]

1. Walkthrough: each script's wall time beside a bare `python -c "import torch"`.
2. DDP scaling: a08 under torchrun with N = 1, 2, 4 CPU processes (and one per GPU where there
   are GPUs) against a08's loop in one plain process without DDP, over per-process batch sizes.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from common.walkthrough import STEPS  # noqa: E402

SCRIPTS = [script for script, _ in STEPS]  # the one list of scripts, in the tutorial's order
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


def throughput(command: list[str], env: dict) -> tuple[float, float]:
    """(samples/s, training seconds) from a08's timing line."""
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True,
                             text=True).stdout
    match = THROUGHPUT.search(out)
    if not match:
        raise RuntimeError(f"no timing line in the output of {command}")
    return float(match[3]), float(match[1])


def ddp_scaling(batch_sizes: list[int], nprocs: list[int], min_samples: int, epochs: int,
                repeats: int) -> tuple[list[str], list[list[str]], dict]:
    import torch
    rows, speedups = [], {}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        counts = nprocs if device == "cpu" else sorted({1, torch.cuda.device_count()})
        for batch in batch_sizes:
            num_samples = max(min_samples, 64 * batch)  # at least 64 batches an epoch at N=1
            flags = ["--num-samples", str(num_samples), "--batch-size", str(batch),
                     "--epochs", str(epochs), "--log-every", "1000000000",
                     "--device", device]
            # The reference: one process with one thread, as torchrun gives each worker.
            one_thread = clean_env(OMP_NUM_THREADS="1")
            plain_cmd = [sys.executable, str(ROOT / "tests/benchmarks/plain_loop.py"), *flags]
            plain = statistics.median(throughput(plain_cmd, one_thread)[0]
                                      for _ in range(repeats))
            if device == "cpu":
                rows.append([device, str(batch), "plain, 1 thread", f"{plain:.0f}", "1.00x", "-"])
                # What a plain run gets by default: intra-op threads on every core.
                every_core = clean_env(OMP_NUM_THREADS=str(os.cpu_count()))
                rate = statistics.median(throughput(plain_cmd, every_core)[0]
                                         for _ in range(repeats))
                rows.append([device, str(batch), f"plain, {os.cpu_count()} threads",
                             f"{rate:.0f}", f"{rate / plain:.2f}x", "-"])
            for n in counts:
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={n}", str(ROOT / "a08_ddp_torchrun.py"), *flags]
                rate = statistics.median(throughput(cmd, one_thread)[0]
                                         for _ in range(repeats))
                speedups[(device, batch, n)] = rate / plain
                rows.append([device, str(batch), f"DDP, N={n}", f"{rate:.0f}",
                             f"{rate / plain:.2f}x", f"{rate / plain / n:.0%}"])
    header = ["device", "batch per process", "run", "samples/s", "speed-up vs plain, 1 thread",
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
    args = parser.parse_args()

    parts = [f"Machine: {machine()}"]
    if args.only in (None, "walkthrough"):
        parts.append("### Walkthrough\n\n" + table(*walkthrough(args.repeats)))
        print(parts[-1], flush=True)
    if args.only in (None, "ddp"):
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
        header, rows, speedups = ddp_scaling(batch_sizes, [int(n) for n in
                                                           args.nprocs.split(",")],
                                             args.num_samples, args.epochs, args.repeats)
        paying = [b for b in batch_sizes if speedups.get(("cpu", b, 2), 0) > 1.0]
        verdict = (f"On the CPU, DDP with 2 processes beats the plain loop from a per-process "
                   f"batch of {min(paying)} on; below that it costs more than it buys."
                   if paying else "On the CPU, DDP with 2 processes never beat the plain loop.")
        parts.append(f"### DDP scaling (max({args.num_samples}, 64 x batch) examples, "
                     f"{args.epochs} epochs)\n\n"
                     + table(header, rows) + "\n\n" + verdict)
        print(parts[-1], flush=True)
    if args.only in (None, "a4"):
        parts.append("### Exercise A.4\n\n```\n" + exercise_a4() + "\n```")
        print(parts[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
