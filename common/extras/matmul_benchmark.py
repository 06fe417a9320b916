"""Exercise A.4, measured properly: matrix multiplication on the CPU and on the accelerator.

The author's solution times one small product with %timeit and does not wait for the GPU, so its
GPU figure is mostly the time to launch a kernel. torch.utils.benchmark warms up, synchronizes the
accelerator around each measurement, repeats, and reports the median.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import dataclass

import torch

from common.extras.cli import heading, positive_int_list
from common.extras.devices import detect_accelerator

DEFAULT_SIZES = (64, 128, 256, 512, 1024, 2048)


@dataclass
class Row:
    size: int
    cpu_s: float
    accelerator_s: float | None  # None on a CPU-only machine


BOOK_CASE = (100, 200, 300)  # Exercise A.4's solution: a 100x200 by 200x300 product


def time_matmul(shape: tuple[int, int, int], device: torch.device,
                min_run_time: float = 0.2, dtype: torch.dtype = torch.float32) -> float:
    """Median seconds of one (m x k) @ (k x n) product on ``device``, shape (m, k, n)."""
    with contextlib.redirect_stderr(io.StringIO()):  # torch 2.4 prints a CUDA_HOME notice
        from torch.utils import benchmark  # here, not at the top: its import is slow

    m, k, n = shape
    generator = torch.Generator().manual_seed(m)
    a = torch.rand(m, k, generator=generator).to(device, dtype)
    b = torch.rand(k, n, generator=generator).to(device, dtype)
    (a @ b).sum().item()  # warm-up: first call pays for kernel selection and allocation
    timer = benchmark.Timer(stmt="a @ b", globals={"a": a, "b": b})
    return timer.blocked_autorange(min_run_time=min_run_time).median


def run_benchmark(sizes: tuple[int, ...], accelerator: torch.device | None) -> list[Row]:
    cpu = torch.device("cpu")
    return [Row(size, time_matmul((size,) * 3, cpu),
                time_matmul((size,) * 3, accelerator) if accelerator is not None else None)
            for size in sizes]


def crossover(rows: list[Row]) -> int | None:
    """The smallest size from which on the accelerator is faster at every larger size."""
    winner = None
    for row in reversed(rows):
        if row.accelerator_s is None or row.accelerator_s >= row.cpu_s:
            break
        winner = row.size
    return winner


def format_table(rows: list[Row], accelerator: torch.device | None) -> str:
    name = accelerator.type.upper() if accelerator is not None else None
    header = f"{'size':>6} | {'CPU (ms)':>10}"
    if name:
        header += f" | {name + ' (ms)':>10} | {'speed-up':>8}"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = f"{row.size:>6} | {row.cpu_s * 1e3:>10.3f}"
        if row.accelerator_s is not None:
            line += f" | {row.accelerator_s * 1e3:>10.3f} | {row.cpu_s / row.accelerator_s:>7.1f}x"
        lines.append(line)
    return "\n".join(lines)


def add_benchmark_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark", action="store_true",
                        help="Exercise A.4: time matrix multiplication on the CPU and the "
                             "accelerator (default: off)")
    parser.add_argument("--sizes", type=positive_int_list, default=DEFAULT_SIZES,
                        metavar="N,N,...",
                        help=f"matrix sizes for --benchmark "
                             f"(default: {','.join(map(str, DEFAULT_SIZES))})")


def exercise_a4(sizes: tuple[int, ...]) -> None:
    """Print the timing table and the size from which the accelerator wins."""
    heading("9.1 Exercise A.4: when does the accelerator win?")
    found = detect_accelerator()
    accelerator = torch.device(found) if found else None
    m, k, n = BOOK_CASE
    devices = [torch.device("cpu")] + ([accelerator] if accelerator is not None else [])
    timed = ", ".join(f"{device.type.upper()} {time_matmul(BOOK_CASE, device) * 1e6:.1f} us"
                      for device in devices)
    print(f"The solution's own case, {m}x{k} @ {k}x{n}: {timed}\n"
          "(its %timeit printed CPU 63.8 us, GPU 13.8 us; it did not wait for the GPU, so its\n"
          "GPU figure is mostly the time to launch the kernel)")
    rows = run_benchmark(sizes, accelerator)
    print("Median time of one float32 (size x size) @ (size x size) product:")
    print(format_table(rows, accelerator))
    if accelerator is None:
        print("No accelerator on this machine, so there is no second column to compare with.")
    else:
        report_crossover(rows, accelerator)
    precision_table(max(sizes), accelerator or torch.device("cpu"))


def report_crossover(rows: list[Row], accelerator: torch.device) -> None:
    size = crossover(rows)
    name = accelerator.type.upper()
    print(f"The {name} wins from size {size} on." if size else
          f"The {name} did not win at any size measured.")


def lower_precisions(device: torch.device) -> list[tuple[str, torch.dtype, bool]]:
    """(name, dtype, TF32 on) of what this device multiplies fast beyond float32: TF32 on the
    tensor cores of CUDA GPUs from Ampere on; bfloat16 where supported; float16 on GPUs (a
    CPU multiplies it without a fast path, orders of magnitude slower)."""
    cuda = device.type == "cuda"
    found = []
    if cuda and torch.cuda.get_device_capability(device) >= (8, 0):
        found.append(("TF32", torch.float32, True))
    if not cuda or torch.cuda.is_bf16_supported():
        found.append(("bfloat16", torch.bfloat16, False))
    if device.type != "cpu":
        found.append(("float16", torch.float16, False))
    return found


def precision_table(size: int, device: torch.device) -> None:
    """The GPU guide's tensor cores and mixed precision, timed: one size x size product in
    each precision the device supports, with its speed-up over float32."""
    heading(f"GPU guide: tensor cores and lower precisions ({device.type}, {size} x {size})")
    base = time_matmul((size,) * 3, device)
    print(f"{'float32':>9}: {base * 1e3:9.3f} ms")
    for name, dtype, tf32 in lower_precisions(device):
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            seconds = time_matmul((size,) * 3, device, dtype=dtype)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        print(f"{name:>9}: {seconds * 1e3:9.3f} ms, {base / seconds:5.1f}x float32's speed")
    if device.type != "cuda":
        print("TF32 and float16 tensor cores: CUDA GPUs only (not here).")
