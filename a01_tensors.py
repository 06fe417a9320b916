"""Sections 1.3 and 2 of "PyTorch in One Hour": checking the install (Exercise A.1; Exercise
A.2's check is the book's own script, named below), and tensors.

Run: python a01_tensors.py
"""

import platform

import numpy as np
import torch

from common import devices, flags, runner


def section_1_3_environment() -> None:
    # Exercise A.1 is installing PyTorch; Exercise A.2 checks the result (the book's own check:
    # https://github.com/rasbt/LLMs-from-scratch/blob/main/setup/02_installing-python-libraries/python_environment_check.py).
    # EXTRA: our check names Python and NumPy too, since a wrong interpreter or environment is
    # the usual mistake.
    runner.heading("1.3 Installing PyTorch: what this machine has (Exercise A.1)")
    print("Python:", platform.python_version())
    print("numpy.__version__:", np.__version__)
    print("torch.__version__:", torch.__version__)
    print("torch.cuda.is_available():", torch.cuda.is_available())
    print("torch.backends.mps.is_available():", torch.backends.mps.is_available())
    for note in devices.install_notes():  # EXTRA: an install that does not fit this machine
        print(note)


def section_2_1_ranks() -> torch.Tensor:
    runner.heading("2.1 Scalars, vectors, matrices and tensors")
    tensor0d = torch.tensor(1)  # rank 0: from a Python integer
    tensor1d = torch.tensor([1, 2, 3])  # rank 1: from a list
    tensor2d = torch.tensor([[1, 2], [3, 4]])  # rank 2: from a nested list
    tensor3d = torch.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])  # rank 3
    # EXTRA: the four printed, which the text only builds
    for name, tensor in [("tensor0d", tensor0d), ("tensor1d", tensor1d),
                         ("tensor2d", tensor2d), ("tensor3d", tensor3d)]:
        print(f"{name} (rank {tensor.ndim}):\n{tensor!s}")
    return tensor1d


def section_2_1_from_numpy() -> None:
    # EXTRA: this function is the author's notebook for section 2.1, not the text's
    runner.heading("2.1 Tensors from NumPy arrays: a copy, or shared memory")
    ary3d = np.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    tensor3d_2 = torch.tensor(ary3d)  # copies the NumPy array
    tensor3d_3 = torch.from_numpy(ary3d)  # shares memory with the NumPy array
    ary3d[0, 0, 0] = 999
    print("torch.tensor(ary3d) after ary3d[0, 0, 0] = 999 (a copy: unchanged):\n",
          tensor3d_2, sep="")
    print("torch.from_numpy(ary3d) after ary3d[0, 0, 0] = 999 (shared: changed):\n",
          tensor3d_3, sep="")


def section_2_2_dtypes(tensor1d: torch.Tensor) -> None:
    runner.heading("2.2 Tensor data types")
    print("tensor1d.dtype:", tensor1d.dtype)
    floatvec = torch.tensor([1.0, 2.0, 3.0])
    print("floatvec.dtype:", floatvec.dtype)
    floatvec = tensor1d.to(torch.float32)
    print("floatvec.dtype, after floatvec = tensor1d.to(torch.float32):", floatvec.dtype)


def section_2_3_operations() -> None:
    runner.heading("2.3 Common PyTorch tensor operations")
    tensor2d = torch.tensor([[1, 2, 3], [4, 5, 6]])
    print("tensor2d:\n", tensor2d, sep="")
    print("tensor2d.shape:", tensor2d.shape)
    print("tensor2d.reshape(3, 2):\n", tensor2d.reshape(3, 2), sep="")
    print("tensor2d.view(3, 2):\n", tensor2d.view(3, 2), sep="")
    print("tensor2d.T:\n", tensor2d.T, sep="")
    print("tensor2d.matmul(tensor2d.T):\n", tensor2d.matmul(tensor2d.T), sep="")
    print("tensor2d @ tensor2d.T:\n", tensor2d @ tensor2d.T, sep="")


def main() -> None:
    section_1_3_environment()
    tensor1d = section_2_1_ranks()
    section_2_1_from_numpy()
    section_2_2_dtypes(tensor1d)
    section_2_3_operations()


if __name__ == "__main__":
    flags.Parser(__doc__).parse_args()  # --help
    runner.run(main)
