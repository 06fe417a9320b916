"""The flags of a07 and a08 beyond the tutorial's training knobs, built and checked in one call
each. a08's checks need torchrun's variables too, and all are made before any process group
exists, so a bad flag or a bad variable never leaves the run waiting for its peers."""

from __future__ import annotations

import argparse
import os
import warnings
from datetime import timedelta

from common import ending, toy_data
from common.extras.checkpoint import check_writable
from common.extras.cli import add_training_flags, make_parser, positive_float, positive_int
from common.extras.data import check_batch_fits, gives_full_batches, samples_needed
from common.extras.devices import add_device_flag, device_for_process, device_to_show
from common.extras.errors import UserError
from common.extras.install_check import gpu_missing_from_the_build
from common.extras.launcher import Launch, read_launch
from common.extras.matmul_benchmark import add_benchmark_flags
from common.extras.plotting import add_plot_flag
from common.extras.precision import add_amp_flag, check_amp

import torch


def seconds(text: str) -> timedelta:
    """argparse type: a number of seconds > 0 that torch's stores can wait (it counts in
    milliseconds in a C int: about 24 days at most), as a timedelta."""
    return timedelta(seconds=positive_float(text, maximum=2_000_000))


def parse_a07_flags(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    """a07's flags, with the checks no single flag's type can make."""
    parser = make_parser(doc)
    for add in (add_training_flags, add_plot_flag, add_device_flag, add_benchmark_flags,
                add_amp_flag):
        add(parser)
    parser.add_argument("--gpu-guides", action="store_true",
                        help="after the tutorial's sections, run the two GPU articles' code, "
                             "corrected, on the same device (default: off)")
    args = parser.parse_args(argv)
    check_batch_fits(parser, args.batch_size, len(toy_data()[1]))
    device_type = device_to_show(args.device).type
    check_amp(parser, args.amp, device_type)
    if device_type == "cuda" and (missing := gpu_missing_from_the_build()):
        raise UserError(missing)  # before section 9.1's first CUDA operation would fail on it
    return args


def parse_a08_flags(doc: str, argv: list[str] | None = None
                    ) -> tuple[argparse.Namespace, Launch, torch.device]:
    """a08's flags, and this process's place and device: (args, launch, device)."""
    parser = make_parser(doc)
    for add in (add_training_flags, add_plot_flag, add_ddp_flags, add_amp_flag):
        add(parser)
    args = parser.parse_args(argv)
    launch = check_ddp_flags(parser, args)
    device = device_for_process(parser, args.device, launch)
    check_amp(parser, args.amp, device.type)
    ending.add_to_stop_line("; with --snapshot, the same command resumes from the last epoch")
    return args, launch, device


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
    parser.add_argument("--snapshot", metavar="PATH", default=None,
                        help="save training state here after every epoch, and resume from it "
                             "if it exists (default: no snapshots)")
    parser.add_argument("--spawn", type=positive_int, default=None, metavar="N",
                        help="start N processes on this machine without torchrun, with "
                             "torch.multiprocessing.spawn, meeting at a free port of this machine "
                             "without libuv (works on Windows) (default: off)")


def check_ddp_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Launch:
    """This process's place (torchrun's variables, or what --spawn N gives its workers), after
    the usage errors no single flag's type can find."""
    spawning = args.spawn and not ending.started_by_a_script()  # --spawn's parent, not its workers
    if spawning and "RANK" in os.environ:
        parser.error("argument --spawn: torchrun already started the processes; use one or "
                     "the other")
    launch = (Launch(world_size=args.spawn, local_world_size=args.spawn, spawn=args.spawn)
              if spawning else read_launch())  # the parent: checked as its workers will be
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
