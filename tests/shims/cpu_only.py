"""Test shim: a machine without accelerators, whatever this one has. The default suite asserts
what a CPU-only machine prints; with this, it passes on a machine with CUDA GPUs or Apple's MPS
too. Every subprocess a test starts gets it (conftest.clean_env); conftest's autouse fixture
hides them in the tests' own process with ``answers.hide_accelerators`` (not by importing this
module: pytest's process must still see a GPU where the gpu-marked tests run)."""

import os

from answers import hide_accelerators

# CUDA hidden from the driver on, where it is ("" would do, but Windows drops an empty variable)
os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
hide_accelerators()
