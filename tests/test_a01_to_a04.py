"""a01 to a04: each runs alone from a temporary folder and prints the spec's values."""

import pytest

from conftest import run_script, section, shim_env


@pytest.fixture(scope="module")
def a01(default_run):
    return default_run("a01_tensors.py")


@pytest.fixture(scope="module")
def a02(default_run):
    return default_run("a02_autograd.py")


@pytest.fixture(scope="module")
def a03(default_run):
    return default_run("a03_mlp.py")


@pytest.fixture(scope="module")
def a04(default_run):
    return default_run("a04_dataloaders.py")


def test_a01_exits_cleanly(a01):
    assert a01.returncode == 0, a01.stderr
    assert a01.stderr == ""


def test_a01_section_1_3_environment_check(a01):
    assert "=== 1.3 Installing PyTorch" in a01.stdout
    import torch
    assert f"torch.__version__: {torch.__version__}\n" in a01.stdout
    assert "torch.cuda.is_available(): False\n" in a01.stdout  # tests see a CPU-only machine
    assert "torch.backends.mps.is_available(): False\n" in a01.stdout


def test_a01_section_2_1_ranks_0_to_3(a01):
    out = a01.stdout
    assert "tensor0d (rank 0):\ntensor(1)\n" in out
    assert "tensor1d (rank 1):\ntensor([1, 2, 3])\n" in out
    assert "tensor2d (rank 2):\ntensor([[1, 2],\n        [3, 4]])\n" in out
    assert ("tensor3d (rank 3):\ntensor([[[1, 2],\n         [3, 4]],\n\n"
            "        [[5, 6],\n         [7, 8]]])\n") in out


def test_a01_exercise_a2_names_python_and_numpy(a01):
    import platform

    import numpy
    text = section(a01.stdout, "1.3 Installing PyTorch")
    assert "(Exercises A.1 and A.2)" in text
    assert f"Python: {platform.python_version()}\n" in text
    assert f"numpy.__version__: {numpy.__version__}\n" in text


def test_a01_section_2_1_numpy_copy_and_shared_memory(a01):
    text = section(a01.stdout, "2.1 Tensors from NumPy arrays")
    assert ("torch.tensor(ary3d) after ary3d[0, 0, 0] = 999 (a copy: unchanged):\n"
            "tensor([[[1, 2],\n         [3, 4]],\n\n        [[5, 6],\n         [7, 8]]])\n"
            ) in text
    assert ("torch.from_numpy(ary3d) after ary3d[0, 0, 0] = 999 (shared: changed):\n"
            "tensor([[[999,   2],\n         [  3,   4]],\n\n"
            "        [[  5,   6],\n         [  7,   8]]])\n") in text


def test_a01_section_2_2_dtypes(a01):
    out = a01.stdout
    assert "tensor1d.dtype: torch.int64\n" in out
    assert "floatvec.dtype: torch.float32\n" in out
    assert "tensor1d.to(torch.float32).dtype: torch.float32\n" in out


def test_a01_section_2_3_operations(a01):
    out = a01.stdout
    assert "tensor2d.shape: torch.Size([2, 3])\n" in out
    three_by_two = "tensor([[1, 2],\n        [3, 4],\n        [5, 6]])\n"
    assert "tensor2d.reshape(3, 2):\n" + three_by_two in out
    assert "tensor2d.view(3, 2):\n" + three_by_two in out
    assert "tensor2d.T:\ntensor([[1, 4],\n        [2, 5],\n        [3, 6]])\n" in out
    gram = "tensor([[14, 32],\n        [32, 77]])\n"
    assert "tensor2d.matmul(tensor2d.T):\n" + gram in out
    assert "tensor2d @ tensor2d.T:\n" + gram in out


def test_a01_sections_in_tutorial_order(a01):
    out = a01.stdout
    positions = [out.index(f"=== {n} ") for n in ("1.3", "2.1", "2.2", "2.3")]
    assert positions == sorted(positions)


def test_a02_section_3_forward_loss(a02):
    assert a02.returncode == 0, a02.stderr
    assert "=== 3 Seeing models as computation graphs ===\nloss: tensor(0.0852)\n" in a02.stdout


def test_a02_section_4_autograd_grad(a02):
    assert "grad(loss, w1): (tensor([-0.0898]),)\n" in a02.stdout
    assert "grad(loss, b): (tensor([-0.0817]),)\n" in a02.stdout


def test_a02_section_4_backward(a02):
    assert "after loss.backward(), w1.grad: tensor([-0.0898])\n" in a02.stdout
    assert "after loss.backward(), b.grad: tensor([-0.0817])\n" in a02.stdout


def test_a03_section_5_module_tree(a03):
    assert a03.returncode == 0, a03.stderr
    assert (
        "NeuralNetwork(\n"
        "  (layers): Sequential(\n"
        "    (0): Linear(in_features=50, out_features=30, bias=True)\n"
        "    (1): ReLU()\n"
        "    (2): Linear(in_features=30, out_features=20, bias=True)\n"
        "    (3): ReLU()\n"
        "    (4): Linear(in_features=20, out_features=3, bias=True)\n"
        "  )\n"
        ")\n"
    ) in a03.stdout


def test_a03_section_5_parameter_count(a03):
    assert "Total number of trainable model parameters: 2213\n" in a03.stdout
    assert "model.layers[0].weight.shape: torch.Size([30, 50])\n" in a03.stdout


def test_a03_exercise_a3_752_parameters(a03):
    assert "NeuralNetwork(2, 2) trainable parameters: 752\n" in a03.stdout


def test_a03_section_5_seeded_weights(a03):
    out = a03.stdout
    assert "tensor([[-0.0577,  0.0047, -0.0702,  ...,  0.0222,  0.1260,  0.0865],\n" in out
    assert "        [ 0.0790,  0.1343, -0.0293,  ...,  0.0344, -0.0971, -0.0509]],\n" in out


def test_a03_section_5_forward_pass(a03):
    out = a03.stdout
    assert "model(X): tensor([[-0.1262,  0.1080, -0.1792]], grad_fn=<AddmmBackward0>)\n" in out
    assert "model(X) under torch.no_grad(): tensor([[-0.1262,  0.1080, -0.1792]])\n" in out
    assert "torch.softmax(model(X), dim=1): tensor([[0.3113, 0.3934, 0.2952]])\n" in out


def test_a04_section_6_toy_data(a04):
    assert a04.returncode == 0, a04.stderr
    out = a04.stdout
    assert ("X_train:\ntensor([[-1.2000,  3.1000],\n        [-0.9000,  2.9000],\n"
            "        [-0.5000,  2.6000],\n        [ 2.3000, -1.1000],\n"
            "        [ 2.7000, -1.5000]])\n") in out
    assert "y_train: tensor([0, 0, 0, 1, 1])\n" in out  # five labels, not the blog's four
    assert "len(train_ds): 5\n" in out


def test_a04_section_6_shuffled_batches(a04):
    text = section(a04.stdout, "6 DataLoader: shuffled")
    assert ("Batch 1: tensor([[ 2.3000, -1.1000],\n        [-0.9000,  2.9000]]) "
            "tensor([1, 0])\n") in text
    assert ("Batch 2: tensor([[-1.2000,  3.1000],\n        [-0.5000,  2.6000]]) "
            "tensor([0, 0])\n") in text
    assert "Batch 3: tensor([[ 2.7000, -1.5000]]) tensor([1])\n" in text


def test_a04_section_6_drop_last_batches(a04):
    text = section(a04.stdout, "6 DataLoader with drop_last=True")
    assert ("Batch 1: tensor([[-1.2000,  3.1000],\n        [-0.5000,  2.6000]]) "
            "tensor([0, 0])\n") in text
    assert ("Batch 2: tensor([[ 2.3000, -1.1000],\n        [-0.9000,  2.9000]]) "
            "tensor([1, 0])\n") in text
    assert "Batch 3" not in text


def test_a04_section_6_test_loader_in_order(a04):
    text = section(a04.stdout, "6 The test loader")
    assert ("Batch 1: tensor([[-0.8000,  2.8000],\n        [ 2.6000, -1.6000]]) "
            "tensor([0, 1])\n") in text


def test_a04_section_6_num_workers_explained_and_working(a04):
    text = section(a04.stdout, "6 num_workers")
    assert "num_workers=0 loads every batch in the main process" in text
    assert "through 2 workers" in text
    assert "Batch 3: tensor([[ 2.7000, -1.5000]]) tensor([1])\n" in text


def test_a04_workers_started_by_spawn_give_the_same_batches(a04, tmp_path):
    """macOS and Windows start DataLoader workers by spawn (Linux forks): simulated here by a
    shim that makes spawn the start method; the whole output must not change."""
    result = run_script("a04_dataloaders.py", cwd=tmp_path, env=shim_env("spawn_start"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == a04.stdout
    assert "Dataset\ndefined in a notebook cell fails there" in result.stdout
