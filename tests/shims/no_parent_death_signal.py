"""Test shim: torch's spawn asks for no parent-death signal, as on macOS and Windows, where
``_prctl_pr_set_pdeathsig`` (Linux's prctl) does nothing (torch/multiprocessing/spawn.py,
``_wrap``: "On other systems the following function call has no effect"): a --spawn worker then
outlives a parent that is ended, unless the parent ends it. Named in TEST_SHIMS (see
sitecustomize.py); with SIMULATE_WINDOWS=1 every child gets it (conftest.clean_env)."""

import importlib

importlib.import_module("torch.multiprocessing.spawn")._prctl_pr_set_pdeathsig = \
    lambda signum: None
