"""Test shim: every all_reduce fails as gloo does when a peer has gone, in the words of torch's
build for the OS ``platform.system()`` names (answers.lost_peer: Linux's or Windows'). Named
in TEST_SHIMS (see sitecustomize.py), after as_windows where Windows' words are wanted."""

import torch.distributed as dist
from answers import lost_peer


def _all_reduce_to_a_lost_peer(*args, **kwargs):
    raise lost_peer()


dist.all_reduce = _all_reduce_to_a_lost_peer
