"""a08's flags beyond the tutorial's training knobs, and the checks that need them together
with torchrun's variables: all made before any process group exists, so a bad flag or a bad
variable never leaves the run waiting for its peers."""

from __future__ import annotations

import argparse
import os
import warnings
from datetime import timedelta

from common.extras.checkpoint import check_writable
from common.extras.cli import positive_float, positive_int
from common.extras.data import gives_full_batches, samples_needed
from common.extras.launcher import (
    Launch,
    is_spawned_worker,
    read_launch,
    spawn_launch,
    started_by_torchrun,
)

import torch


def seconds(text: str) -> timedelta:
    """argparse type: a number of seconds > 0 that torch's stores can wait (it counts in
    milliseconds in a C int: about 24 days at most), as a timedelta."""
    return timedelta(seconds=positive_float(text, maximum=2_000_000))


def add_ddp_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: one CUDA GPU per process where there are enough, else the "
                             "CPU (default: %(default)s)")
    parser.add_argument("--num-samples", type=positive_int, default=None,
                        help="training-set size; more than 5 adds noisy copies of the toy data "
                             "(default: the tutorial's 5, enlarged only if some process would "
                             "get no full batch)")
    parser.add_argument("--timeout", type=seconds, default="120",
                        help="seconds to wait for the other processes in any collective "
                             "before giving up (default: %(default)s)")
    parser.add_argument("--log-every", type=positive_int, default=1, metavar="K",
                        help="print the loss of every K-th batch of an epoch "
                             "(default: %(default)s, every batch, as in the tutorial)")
    parser.add_argument("--snapshot", metavar="PATH", default=None,
                        help="save training state here after every epoch, and resume from it "
                             "if it exists (default: no snapshots)")
    parser.add_argument("--spawn", type=positive_int, default=None, metavar="N",
                        help="start N processes on this machine without torchrun, with "
                             "torch.multiprocessing.spawn, meeting at a free port of this machine "
                             "without libuv (works on Windows) (default: off)")
    parser.add_argument("--fast-batches", action="store_true",
                        help="fetch each batch with one indexing operation instead of example "
                             "by example: the same batches in the same order, faster for large "
                             "data sets (default: off, the tutorial's loader)")


def check_ddp_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Launch:
    """This process's place among the processes (torchrun's variables, or what --spawn N will
    give its workers), after the usage errors that no single flag's type can find."""
    if args.spawn and started_by_torchrun():
        parser.error("argument --spawn: torchrun already started the processes; use one or "
                     "the other")
    launch = spawn_launch(args.spawn) if args.spawn and not is_spawned_worker() else read_launch()
    if args.snapshot is not None and launch.rank == 0:  # only rank 0 writes it
        if not os.path.isdir(os.path.dirname(args.snapshot) or "."):
            parser.error(f"argument --snapshot: the folder of {args.snapshot} does not exist")
        if problem := check_writable(args.snapshot, "--snapshot"):
            parser.error(f"argument --snapshot: {problem}")
    if args.num_samples is not None and not gives_full_batches(
            args.num_samples, launch.world_size, args.batch_size):
        parser.error(f"argument --num-samples: {args.num_samples} examples leave some of the "
                     f"{launch.world_size} processes without a full batch of {args.batch_size}; "
                     f"use at least {samples_needed(launch.world_size, args.batch_size)}")
    if not torch.cuda.is_available():
        # The text's loader pins memory for faster copies to a GPU; without one, torch only
        # warns that pinning does nothing, which a learner can do nothing about.
        warnings.filterwarnings("ignore", message=".*'pin_memory' argument is set as true")
    return launch
