"""The companion's machinery: not needed to follow the tutorial.

Everything here is ours, not the text's: flags and their checks, device choice, safe
checkpoints, a08's distributed helpers, snapshots and reports, the plot, the Exercise A.4
benchmark and the walkthrough. The scripts mark each use with ``# EXTRA:``. The tutorial's
own shared code (the toy data, ToyDataset, NeuralNetwork, compute_accuracy) is one level up, in
``common/__init__.py``.

The scripts use what they need through this package (``extras.make_parser``), so each has one
line of imports from ``common``, the tutorial's names and ours. A name's module is imported
when a script first uses it: ``common`` imports this package before torch loads, and
``startup`` (stdlib only) must act before then, while ``data``, ``plotting``, ``precision``
and ``reporting`` use the tutorial's code, which ``common`` defines after that. Each module
depends only on those above it in this table:

| module | what it holds |
| --- | --- |
| errors | ``UserError``: a problem the user can fix, said in one line |
| launcher | torchrun's variables, read and checked; the torchrun command line (no torch) |
| signals | Ctrl-C and SIGTERM: one line, within a second, even while torch waits in C++ |
| startup | before torch loads: closed streams, a torch.py that hides torch, signals meanwhile |
| cli | the argument parser, range-checked flag types, ``run`` (one-line errors, signals) |
| devices | a07's ``--device`` and its section 9.1 on a CPU-only machine; a08's device per process |
| checkpoint | atomic saving and one-line errors around a06's torch.save / torch.load |
| data | the batch-size rule, noisy copies for many processes, ``--fast-batches`` |
| rendezvous | a08's store, ``--spawn``, start-up errors, leaving the process group |
| ddp_flags | a08's flags, checked with torchrun's variables before any process group exists |
| reporting | a08's process names, training time and global accuracy |
| snapshots | a08's ``--snapshot``: resume, and save after every epoch |
| matmul_benchmark | Exercise A.4 (a07 ``--benchmark``), with the lower precisions |
| precision | ``--amp`` (autocast), activation memory, gradient checkpointing |
| gpu_guides | a07 ``--gpu-guides``: the two GPU articles, run and measured |
| plotting | a05, a07 and a08 ``--plot`` |
| walkthrough | ``python -m common.extras.walkthrough``: every script in order |
"""

from __future__ import annotations

import importlib
from typing import Any

from common.extras import startup

_NAMES_BY_MODULE = {
    "checkpoint": ("atomic_path", "check_writable", "explain_checkpoint_errors"),
    "cli": ("add_training_flags", "heading", "make_parser", "run"),
    "data": ("check_batch_fits", "enlarge_for_processes", "fast_batch_loader"),
    "ddp_flags": ("add_ddp_flags", "check_ddp_flags"),
    "devices": ("add_device_flag", "device_for_process", "device_to_show", "explain_cpu_only"),
    "errors": ("require_finite_loss",),
    "gpu_guides": ("add_gpu_guides_flag", "run_gpu_articles"),
    "launcher": ("Launch",),
    "matmul_benchmark": ("add_benchmark_flags", "exercise_a4"),
    "plotting": ("add_plot_flag", "plot_training"),
    "precision": ("add_amp_flag", "autocast", "check_amp"),
    "rendezvous": ("DDP_ENDING", "free_model_and_wait_for_gloo", "spawn",
                   "store_for_this_attempt"),
    "reporting": ("TrainingClock", "describe_run", "process_name", "report_summary"),
    "snapshots": ("Snapshot",),
}
_MODULE_OF = {name: module for module, names in _NAMES_BY_MODULE.items() for name in names}

__all__ = ["startup", *sorted(_MODULE_OF)]


def __getattr__(name: str) -> Any:
    """``extras.NAME``: NAME from its module, imported on first use (PEP 562)."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
