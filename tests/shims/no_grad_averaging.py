"""Test shim: a DistributedDataParallel that never averages gradients, as if a08 trained each
process's copy on its own. Named in TEST_SHIMS (see sitecustomize.py): a08 must then report
that the processes' parameters differ (tests/test_a08_ddp.py), or its check proves nothing."""

from torch.nn.parallel import DistributedDataParallel

_init = DistributedDataParallel.__init__


def _init_without_gradient_sync(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.require_backward_grad_sync = False  # what no_sync() sets, for good


DistributedDataParallel.__init__ = _init_without_gradient_sync
