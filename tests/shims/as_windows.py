"""Test shim: this process answers as Windows does, ``platform.system()`` "Windows", once torch
has loaded (torch's own import asks it, and on Windows loads its DLLs instead). With
SIMULATE_WINDOWS=1 every child of the suite gets it (conftest.clean_env), beside no_libuv, so
that a08's, devices' and the walkthrough's Windows branches run. Named in TEST_SHIMS (see
sitecustomize.py)."""

import platform

import torch  # noqa: F401
from answers import answering

platform.system = answering(platform.system, "Windows")
