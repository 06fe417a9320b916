"""Sections 3 and 4 of "PyTorch in One Hour": computation graphs and automatic differentiation.

Run: python a02_autograd.py
"""

import torch
import torch.nn.functional as F
from torch.autograd import grad

from common import flags, runner


def section_3_forward_pass() -> None:
    runner.heading("3 Seeing models as computation graphs")
    y = torch.tensor([1.0])  # true label
    x1 = torch.tensor([1.1])  # input feature
    w1 = torch.tensor([2.2])  # weight parameter
    b = torch.tensor([0.0])  # bias unit
    z = x1 * w1 + b  # net input
    a = torch.sigmoid(z)  # activation and output
    loss = F.binary_cross_entropy(a, y)
    print("loss:", loss)


def section_4_gradients() -> None:
    runner.heading("4 Automatic differentiation made easy")
    y = torch.tensor([1.0])
    x1 = torch.tensor([1.1])
    w1 = torch.tensor([2.2], requires_grad=True)
    b = torch.tensor([0.0], requires_grad=True)
    z = x1 * w1 + b
    a = torch.sigmoid(z)
    loss = F.binary_cross_entropy(a, y)

    # retain_graph=True keeps the graph so that it can be used again below
    grad_L_w1 = grad(loss, w1, retain_graph=True)
    grad_L_b = grad(loss, b, retain_graph=True)
    print("grad(loss, w1):", grad_L_w1)
    print("grad(loss, b):", grad_L_b)

    loss.backward()  # the usual way: fills .grad of every leaf that requires it
    print("after loss.backward(), w1.grad:", w1.grad)
    print("after loss.backward(), b.grad:", b.grad)


def main() -> None:
    section_3_forward_pass()
    section_4_gradients()


if __name__ == "__main__":
    flags.Parser(__doc__).parse_args()  # --help
    runner.run(main)
