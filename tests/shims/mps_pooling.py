"""Test shim: adaptive average pooling that refuses what Apple's MPS refuses, an input size that
is not a multiple of the output size (pytorch/pytorch#96056, #97109, #143864), with MPS's
message. Named in TEST_SHIMS (see sitecustomize.py): a07 --gpu-guides must still pass."""

import torch.nn.functional as F

_adaptive_avg_pool2d = F.adaptive_avg_pool2d


def adaptive_avg_pool2d_as_on_mps(input, output_size):
    sizes = output_size if isinstance(output_size, tuple) else (output_size, output_size)
    for have, want in zip(input.shape[-2:], sizes, strict=True):
        if want is not None and have % want:
            raise RuntimeError("Adaptive pool MPS: input sizes must be divisible by output "
                               "sizes. Non-divisible input sizes are not implemented on MPS "
                               "device yet.")
    return _adaptive_avg_pool2d(input, output_size)


F.adaptive_avg_pool2d = adaptive_avg_pool2d_as_on_mps
