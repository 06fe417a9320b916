"""Test shim: no setuptools, as in Python 3.12's virtual environments beside a torch before 2.5,
which does not declare it (pytorch/pytorch PR #133561): a07 --benchmark must not need it.
Named in TEST_SHIMS (see sitecustomize.py)."""

import sys

sys.modules["setuptools"] = None  # `import setuptools` raises ModuleNotFoundError
