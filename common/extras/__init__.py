"""The companion's machinery: not needed to follow the tutorial.

Everything here is ours, not the text's: flags and their checks, device choice, safe
checkpoints, a08's distributed helpers, snapshots and reports, the plot, the Exercise A.4
benchmark and the walkthrough. The scripts mark each use with ``# EXTRA:``. The tutorial's
own shared code (the toy data, ToyDataset, NeuralNetwork, compute_accuracy) is one level up, in
``common/__init__.py``, beside ``common/startup.py`` (what acts before torch loads) and
``common/ending.py`` (what Ctrl-C, SIGTERM and a launcher's death do).

The scripts use what they need through this package (``extras.make_parser``), so each has one
line of imports from ``common``, the tutorial's names and ours. Each module depends only on
those above it in this table:

| module | what it holds |
| --- | --- |
| errors | ``UserError``: a problem the user can fix, said in one line |
| launcher | torchrun's variables, read and checked; the torchrun command line (no torch) |
| cli | the argument parser, range-checked flag types, ``run`` (errors in one line) |
| old_torch | what torch before 2.4 (an Intel Mac's 2.2.2) and later releases differ in |
| devices | a07's ``--device`` and its section 9.1 on a CPU-only machine; a08's device per process |
| checkpoint | atomic saving and one-line errors around a06's torch.save / torch.load |
| data | the batch-size rule, noisy copies for many processes |
| rendezvous | a08's store, ``--spawn``, start-up errors, leaving the process group |
| reporting | a08's process names, training time and global accuracy |
| snapshots | a08's ``--snapshot`` (resume, save after every epoch), and its ``TrainingRecord`` |
| matmul_benchmark | Exercise A.4 (a07 ``--benchmark``), with the lower precisions |
| precision | ``--amp`` (autocast) in a precision the device can compute |
| plotting | a05, a07 and a08 ``--plot`` |
| flags | a07's and a08's flags, built and checked in one call each |
| walkthrough | ``python -m common.extras.walkthrough``: every script in order |
"""

from common.extras.checkpoint import atomic_path, check_writable, explain_checkpoint_errors
from common.extras.cli import add_training_flags, heading, make_parser, run
from common.extras.data import check_batch_fits, enlarge_for_processes
from common.extras.devices import rosetta_note, show_device
from common.extras.errors import require_finite_loss
from common.extras.flags import parse_a07_flags, parse_a08_flags
from common.extras.launcher import Launch
from common.extras.matmul_benchmark import exercise_a4
from common.extras.plotting import add_plot_flag, plot_training
from common.extras.precision import autocast
from common.extras.rendezvous import (
    DDP_ENDING,
    free_model_and_wait_for_gloo,
    process_group_options,
    spawn,
)
from common.extras.reporting import process_name, report_summary
from common.extras.snapshots import TrainingRecord

__all__ = [
    "DDP_ENDING", "Launch", "TrainingRecord", "add_plot_flag", "add_training_flags",
    "atomic_path", "autocast", "check_batch_fits", "check_writable", "enlarge_for_processes",
    "exercise_a4", "explain_checkpoint_errors", "free_model_and_wait_for_gloo", "heading",
    "make_parser", "parse_a07_flags", "parse_a08_flags", "plot_training",
    "process_group_options", "process_name", "report_summary", "require_finite_loss",
    "rosetta_note", "run", "show_device", "spawn",
]
