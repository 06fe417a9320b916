"""Every script's flags, not the tutorial's code: what the text does not do (a file, a device, a
launcher's choice), each defaulting to the text's behaviour, with the checks no single flag can
make, all before any work. A mistake is one usage line and exit status 2 (a launch variable:
one line and 1). The text's constants (lr=0.5, num_epochs = 3) stand in the scripts, where a
learner changes them."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform

import torch

from common import checkpoints, devices, processes, runner


class Parser(argparse.ArgumentParser):
    """--help: the script's docstring first; only rank 0 prints."""

    def __init__(self, doc: str | None) -> None:
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)

    def _print_message(self, message, file=None):
        if os.environ.get("RANK", "0") == "0":
            super()._print_message(message, file)


def number(kind: type, low: float, high: float):
    """An argparse type: a ``kind`` from ``low`` to ``high`` (a float: not 0 either)."""
    def parse(text: str) -> float:
        with contextlib.suppress(ValueError):
            if low <= (value := kind(text)) <= high and not (kind is float and value == 0):
                return value
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'a whole number' if kind is int else 'a number'} from {low:g} "
            f"to {high:g}{' (not 0)' if kind is float else ''}")
    return parse


POSITIVE = number(int, 1, 10**9)


def plot_path(text: str) -> str:
    """--plot: a PNG path that can be written, once matplotlib is importable."""
    if os.path.splitext(text)[1].lower() not in ("", ".png"):
        raise argparse.ArgumentTypeError(f"{text}: the plot is a PNG; give a path ending in .png")
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name != "matplotlib":
            raise unloadable(err) from None
        raise argparse.ArgumentTypeError(
            'needs matplotlib: pip install ".[plot]" in the clone\'s environment') from None
    except Exception as err:  # a matplotlib built for NumPy 1, under NumPy 2: ImportError
        raise unloadable(err) from None
    if problem := checkpoints.check_writable(text, "--plot"):  # before training, not after it
        raise argparse.ArgumentTypeError(problem)
    return text


def unloadable(err: Exception) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(
        f"matplotlib is installed but cannot load ({str(err).strip().splitlines()[0]}): "
        f"pip install -U matplotlib in the clone's environment")


def a05(doc: str) -> argparse.Namespace:
    parser = Parser(doc)
    parser.add_argument("--plot", metavar="PATH", type=plot_path,
                        help="save a PNG of the training examples and the decision boundary "
                             "(needs matplotlib; default: no plot)")
    return parser.parse_args()


A06_FOLDER = "folder to run a06 in"  # where the text's torch.save(..., "model.pth") writes


def a06(doc: str) -> argparse.Namespace:
    parser = Parser(doc)
    parser.add_argument("--load", metavar="PATH", default=None,
                        help="restore this checkpoint instead of training "
                             "(default: train, then save to model.pth, here)")
    args = parser.parse_args()
    # the text's model.pth, in the current folder: checked before training, not after it
    if args.load is None and (problem := checkpoints.check_writable("model.pth", A06_FOLDER)):
        parser.error(problem)
    return args


def a07_device(text: str) -> torch.device | None:
    """a07's --device: None for auto (section 9.2's own choice stands), else a device here.
    cpu asks torch nothing: asked, some Intel GPUs' runtimes end Python (TROUBLESHOOTING.md)."""
    if text == "cpu":
        return torch.device("cpu")
    found = devices.accelerator()
    kinds = ("auto", "cpu", "cuda", "mps", *((found,) if found not in (None, "cuda", "mps")
                                            else ()))
    if text not in kinds:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                         f"{', '.join(kinds)})")
    if text not in ("auto", "cpu", found):
        raise argparse.ArgumentError(None, f"argument --device {text}: " + (
            (devices.gpu_unused() or f"this machine has no usable CUDA GPU (torch "
                                     f"{torch.__version__})")
            if text == "cuda" else "MPS is not available here: "
            f"{devices.mps_off() or 'it needs an Apple-silicon Mac'}") + "; use --device auto "
            "or cpu")
    return None if text == "auto" else torch.device(text)


def a07(doc: str) -> argparse.Namespace:
    parser = Parser(doc)
    parser.add_argument("--device", type=a07_device, default="auto", metavar="{auto,cpu,cuda,mps}",
                        help="where to train; auto: CUDA, then MPS, then CPU (default: auto)")
    parser.add_argument("--benchmark", action="store_true", help="Exercise A.4: time matrix "
                        "multiplication on the CPU and the accelerator (default: off)")
    parser.add_argument("--sizes", type=lambda text: tuple(map(POSITIVE, text.split(","))),
                        default=(64, 128, 256, 512, 1024, 2048), metavar="N,N,...",
                        help="matrix sizes for --benchmark (default: 64,128,256,512,1024,2048)")
    parser.add_argument("--gpu-guides", action="store_true", help="after the tutorial's "
                        "sections, run the two GPU articles' code, corrected (default: off)")
    args = parser.parse_args()
    if (device := devices.device_to_show(args.device)).type == "cuda" and \
            (missing := devices.gpu_missing_from_build([device.index or 0])):
        runner.fail(missing)  # before section 9.1's first CUDA operation fails on it
    return args


def a08(doc: str) -> argparse.Namespace:
    """a08's flags, and torchrun's variables, checked before any process waits."""
    parser = Parser(doc)
    parser.add_argument("--snapshot", metavar="PATH", help="save training state here after "
                        "every epoch; resume from it (default: no snapshots)")
    parser.add_argument("--timeout", type=number(float, 0, 2e6), default=120,
                        help="seconds to wait for the other processes (default: %(default)s)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: one CUDA GPU per process where there are enough, else the "
                             "CPU (default: %(default)s)")
    parser.add_argument("--spawn", type=POSITIVE, metavar="N", help="start N processes "
                        "here without torchrun, as on Windows (default: off)")
    # the deprecated `python -m torch.distributed.launch` passes --local-rank=N; the same
    # number is in LOCAL_RANK, which a08 reads, as under torchrun
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spawn and "RANK" in os.environ:
        parser.error("argument --spawn: torchrun started the processes already; use one or "
                     "the other")
    try:
        launch = processes.read_launch(spawn=args.spawn)
    except runner.UserError as err:
        runner.fail(str(err))
    if args.snapshot and launch.rank == 0 and \
            (problem := checkpoints.check_writable(args.snapshot, "--snapshot")):
        parser.error(f"argument --snapshot: {problem}")
    if args.device != "cpu" and (shortage := devices.gpu_shortage(launch.local_world_size)):
        unseen = None if torch.cuda.device_count() else devices.gpu_unused()  # nvidia-smi
        # on Windows a GPU torch cannot see would not serve a08 either: the shortage says why
        why = shortage if platform.system() == "Windows" else unseen or shortage
        if args.device == "cuda":
            parser.error(f"argument --device cuda: {why}")
        # said on each machine's first process: another machine's GPUs may serve (NCCL there)
        if launch.local_rank == 0 and (torch.cuda.device_count() or unseen):  # a GPU to speak of
            print(f"Note: training on the CPU: {why}")
    return args
