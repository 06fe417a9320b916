"""The companion's machinery: not needed to follow the tutorial. The scripts mark each use
with ``# EXTRA:`` and reach it through this package (``extras.make_parser``), so each has one
line of imports from ``common``. Each module depends only on those before it in this list:
errors, launcher (torchrun's variables; no torch), cli (the parser, ``run``), old_torch,
install_check (a01's check: Rosetta, CUDA builds), devices, checkpoint, data, rendezvous
(a08's store, --spawn, start-up errors), reporting, snapshots, matmul_benchmark (Exercise
A.4), precision (--amp), plotting, flags (a07's and a08's, in one call each), walkthrough
(``python -m common.extras.walkthrough``).
"""

from common.extras.checkpoint import atomic_path, check_writable, explain_checkpoint_errors
from common.extras.cli import add_training_flags, heading, make_parser, run
from common.extras.data import check_batch_fits, enlarge_for_processes
from common.extras.devices import show_device
from common.extras.errors import require_finite_loss
from common.extras.flags import parse_a07_flags, parse_a08_flags
from common.extras.install_check import install_notes
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
    "install_notes",
    "make_parser", "parse_a07_flags", "parse_a08_flags", "plot_training",
    "process_group_options", "process_name", "report_summary", "require_finite_loss",
    "run", "show_device", "spawn",
]
