"""Test shim: a torch built without torch.distributed, as AMD's torch for Windows is
(ROCm/TheRock#1179, #2008): is_available() False, and none of the process-group functions
(distributed_c10d's) or its errors. torch's own internals keep what they import (a real such
build never reaches them). Named in TEST_SHIMS (see sitecustomize.py)."""

import inspect
import warnings

import torch.distributed as dist
from torch.distributed import distributed_c10d

with warnings.catch_warnings():  # reduce_op warns when looked at
    warnings.simplefilter("ignore")
    for _name in [name for name in distributed_c10d.__all__ if inspect.isfunction(
            vars(dist).get(name))] + ["DistError", "DistBackendError", "DistNetworkError"]:
        delattr(dist, _name)
dist.is_available = lambda: False
