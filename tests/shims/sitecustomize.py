"""Test shims: with this folder on PYTHONPATH, Python imports this file at start-up, and it
imports the shim modules that the TEST_SHIMS variable names (comma-separated, in order), each
of which changes torch to behave as another machine's would. conftest.shim_env() sets both;
every subprocess a test starts gets ``cpu_only`` first, unless it asks for the real devices."""

import importlib
import os

for _name in filter(None, os.environ.get("TEST_SHIMS", "").split(",")):
    importlib.import_module(_name)
