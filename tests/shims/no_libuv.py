"""Test shim: a torch whose TCPStore has no libuv, as torch's Windows wheels are built (torch
2.13's words; before 2.6 or so, "build without libuv support").

Named in TEST_SHIMS (see sitecustomize.py): every TCPStore created with libuv (torch's
default) then fails with the error those wheels give, in every module that holds torch's
TCPStore class.
"""

import sys

import torch.distributed as dist
import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend
import torch.distributed.elastic.rendezvous.static_tcp_rendezvous
import torch.distributed.rendezvous  # noqa: F401

_TCPStore = dist.TCPStore


class TCPStoreWithoutLibuv(_TCPStore):
    def __init__(self, *args, **kwargs):
        if kwargs.get("use_libuv", True):
            raise RuntimeError("use_libuv was requested but PyTorch was built without libuv "
                               "support, run with USE_LIBUV=0 to disable it.")
        super().__init__(*args, **kwargs)


for module in list(sys.modules.values()):
    if getattr(module, "TCPStore", None) is _TCPStore:
        module.TCPStore = TCPStoreWithoutLibuv
