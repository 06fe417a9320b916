"""Exercise A.4, measured properly: matrix multiplication on the CPU and on the accelerator.

The author's solution times one small product with %timeit and does not wait for the GPU, so its
GPU figure is mostly the time to launch a kernel. torch.utils.benchmark warms up, repeats and
reports the median; each timed product here waits for its device (torch's Timer synchronizes
CUDA, but MPS only from about torch 2.9, pytorch/pytorch#152199), and the CPU is timed with the
threads torch uses (the Timer's default is one, which overstates every speed-up).
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable

from common.extras.cli import heading, positive_int_list
from common.extras.old_torch import current_accelerator

import torch

DEFAULT_SIZES = (64, 128, 256, 512, 1024, 2048)
BOOK_CASE = (100, 200, 300)  # Exercise A.4's solution: a 100x200 by 200x300 product


def add_benchmark_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark", action="store_true",
                        help="Exercise A.4: time matrix multiplication on the CPU and the "
                             "accelerator (default: off)")
    parser.add_argument("--sizes", type=positive_int_list, default=DEFAULT_SIZES,
                        metavar="N,N,...",
                        help=f"matrix sizes for --benchmark "
                             f"(default: {','.join(map(str, DEFAULT_SIZES))})")


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
    timer = benchmark.Timer(stmt="a @ b; wait()",
                            globals={"a": a, "b": b, "wait": waiter(device)},
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def waiter(device: torch.device) -> Callable[[], None]:
    """What waits until ``device`` has finished its work (torch.cuda.synchronize, ...); nothing
    for the CPU, which computes before returning."""
    return (lambda: None) if device.type == "cpu" else getattr(torch, device.type).synchronize


def exercise_a4(sizes: tuple[int, ...]) -> None:
    """The solution's own case, the timing table, and where the accelerator starts to win."""
    heading("9.1 Exercise A.4: when does the accelerator win?")
    found = current_accelerator()
    devices = [torch.device("cpu")] + ([torch.device(found)] if found else [])
    m, k, n = BOOK_CASE
    timed = ", ".join(f"{device.type.upper()} {time_matmul(BOOK_CASE, device) * 1e6:.1f} us"
                      for device in devices)
    print(f"The solution's own case, {m}x{k} @ {k}x{n}: {timed}\n"
          "(its %timeit printed CPU 63.8 us, GPU 13.8 us; it did not wait for the GPU, so its\n"
          "GPU figure is mostly the time to launch the kernel)")
    print(f"Median time of one float32 (size x size) @ (size x size) product; the CPU uses "
          f"{torch.get_num_threads()} thread(s):")
    name = found.upper() if found else None
    header = f"{'size':>6} | {'CPU (ms)':>10}" + (
        f" | {name + ' (ms)':>10} | {'speed-up':>8}" if name else "")
    print(f"{header}\n{'-' * len(header)}")
    wins_from = None  # the smallest size from which on the accelerator wins at every size
    for size in sizes:
        cpu, *accelerator = (time_matmul((size,) * 3, device) for device in devices)
        line = f"{size:>6} | {cpu * 1e3:>10.3f}"
        if accelerator:
            line += f" | {accelerator[0] * 1e3:>10.3f} | {cpu / accelerator[0]:>7.1f}x"
            wins_from = (wins_from or size) if accelerator[0] < cpu else None
        print(line)
    if name is None:
        print("No accelerator on this machine, so there is no second column to compare with.")
    else:
        print(f"The {name} wins from size {wins_from} on." if wins_from else
              f"The {name} did not win at any size measured.")
