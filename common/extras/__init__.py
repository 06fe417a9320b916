"""The companion's machinery: not needed to follow the tutorial.

Everything here is ours, not the text's: flags and their checks, device choice, safe
checkpoints, a08's distributed helpers and progress (resuming, timing), the plot, the Exercise
A.4 benchmark and the walkthrough. The scripts mark each use with ``# EXTRA:``. The tutorial's
own shared code (the toy data, ToyDataset, NeuralNetwork, compute_accuracy) is one level up, in
``common/__init__.py``.

The scripts import what they use from here, so each has two lines of imports from ``common``:
the tutorial's, and ours.

| module | what it holds |
| --- | --- |
| cli | the argument parser, range-checked flag types, ``run`` (one-line errors, Ctrl-C) |
| devices | a07's ``--device``, and what its section 9.1 shows on a CPU-only machine |
| checkpoint | atomic saving and one-line errors around a06's torch.save / torch.load |
| progress | a08's snapshots, ``--log-every`` and training time |
| distributed | a08's flags, data enlargement, fast batches, global accuracy, restart-safe store |
| matmul_benchmark | Exercise A.4 (a07 ``--benchmark``) |
| plotting | a05 and a07 ``--plot`` |
| walkthrough | ``python -m common.extras.walkthrough``: every script in order |
"""

from common.extras.checkpoint import CheckpointError, atomic_path, explain_checkpoint_errors
from common.extras.cli import (
    UserError,
    add_training_flags,
    check_batch_fits,
    heading,
    make_parser,
    run,
)
from common.extras.devices import (
    add_device_flag,
    demo_device,
    detect_accelerator,
    device_from_flag,
)
from common.extras.distributed import (
    add_ddp_flags,
    check_ddp_flags,
    describe_run,
    enough_examples,
    fast_batch_loader,
    process_name,
    report_global_accuracy,
    settle_before_leaving,
    spawn,
    store_for_this_attempt,
)
from common.extras.matmul_benchmark import add_benchmark_flags, exercise_a4
from common.extras.plotting import add_plot_flag, plot_training
from common.extras.progress import Progress

__all__ = [
    "CheckpointError",
    "Progress",
    "UserError",
    "add_benchmark_flags",
    "add_ddp_flags",
    "add_device_flag",
    "add_plot_flag",
    "add_training_flags",
    "atomic_path",
    "check_batch_fits",
    "check_ddp_flags",
    "demo_device",
    "describe_run",
    "detect_accelerator",
    "device_from_flag",
    "enough_examples",
    "exercise_a4",
    "explain_checkpoint_errors",
    "fast_batch_loader",
    "heading",
    "make_parser",
    "plot_training",
    "process_name",
    "report_global_accuracy",
    "run",
    "settle_before_leaving",
    "spawn",
    "store_for_this_attempt",
]
