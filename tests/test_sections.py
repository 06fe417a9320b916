"""a01 to a07: each runs alone from a temporary folder and prints the spec's values; what
holds for every script (--help, no litter)."""

import re
import sys

import pytest
import torch

from conftest import (
    ROOT,
    SCRIPTS,
    TUTORIAL_LOSS_LINES,
    clean_env,
    copy_of,
    loss_lines,
    run,
    run_main,
    run_script,
    section,
)
from test_reports import entry


def out(runs, script: str) -> str:
    result = runs(script)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


def test_a01_environment_and_tensors(runs):
    import platform

    import numpy
    text = section(a01 := out(runs, "a01_tensors.py"), "1.3 Installing PyTorch")
    assert "what this machine has (Exercise A.1)" in text
    assert f"Python: {platform.python_version()}\nnumpy.__version__: {numpy.__version__}\n" \
           f"torch.__version__: {torch.__version__}\ntorch.cuda.is_available(): False\n" \
           f"torch.backends.mps.is_available(): False\n" in text  # tests see a CPU-only machine
    for expected in [
        "tensor0d (rank 0):\ntensor(1)\n", "tensor1d (rank 1):\ntensor([1, 2, 3])\n",
        "tensor2d (rank 2):\ntensor([[1, 2],\n        [3, 4]])\n",
        "tensor3d (rank 3):\ntensor([[[1, 2],\n         [3, 4]],\n\n        [[5, 6],\n"
        "         [7, 8]]])\n",
        "torch.tensor(ary3d) after ary3d[0, 0, 0] = 999 (a copy: unchanged):\ntensor([[[1, 2],\n"
        "         [3, 4]],\n\n        [[5, 6],\n         [7, 8]]])\n",
        "torch.from_numpy(ary3d) after ary3d[0, 0, 0] = 999 (shared: changed):\n"
        "tensor([[[999,   2],\n         [  3,   4]],\n\n        [[  5,   6],\n"
        "         [  7,   8]]])\n",
        "tensor1d.dtype: torch.int64\nfloatvec.dtype: torch.float32\n"
        "floatvec.dtype, after floatvec = tensor1d.to(torch.float32): torch.float32\n",
        "tensor2d.shape: torch.Size([2, 3])\n",
        "tensor2d.reshape(3, 2):\ntensor([[1, 2],\n        [3, 4],\n        [5, 6]])\n",
        "tensor2d.view(3, 2):\ntensor([[1, 2],\n        [3, 4],\n        [5, 6]])\n",
        "tensor2d.T:\ntensor([[1, 4],\n        [2, 5],\n        [3, 6]])\n",
        "tensor2d.matmul(tensor2d.T):\ntensor([[14, 32],\n        [32, 77]])\n",
        "tensor2d @ tensor2d.T:\ntensor([[14, 32],\n        [32, 77]])\n"]:
        assert expected in a01, expected
    positions = [a01.index(f"=== {n} ") for n in ("1.3", "2.1", "2.2", "2.3")]
    assert positions == sorted(positions)


def test_a02_autograd(runs):
    assert ("=== 3 Seeing models as computation graphs ===\nloss: tensor(0.0852)\n\n"
            "=== 4 Automatic differentiation made easy ===\n"
            "grad(loss, w1): (tensor([-0.0898]),)\ngrad(loss, b): (tensor([-0.0817]),)\n"
            "after loss.backward(), w1.grad: tensor([-0.0898])\n"
            "after loss.backward(), b.grad: tensor([-0.0817])\n") in out(runs, "a02_autograd.py")


def test_a03_the_model(runs):
    a03 = out(runs, "a03_mlp.py")
    assert ("NeuralNetwork(\n  (layers): Sequential(\n"
            "    (0): Linear(in_features=50, out_features=30, bias=True)\n    (1): ReLU()\n"
            "    (2): Linear(in_features=30, out_features=20, bias=True)\n    (3): ReLU()\n"
            "    (4): Linear(in_features=20, out_features=3, bias=True)\n  )\n)\n"
            "Total number of trainable model parameters: 2213\n"
            "model.layers[0].weight:\nParameter containing:\ntensor([[") in a03  # unseeded
    assert "requires_grad=True)\nmodel.layers[0].weight.shape: torch.Size([30, 50])\n" in a03
    assert "NeuralNetwork(2, 2) trainable parameters: 752\n" in a03  # Exercise A.3
    assert "tensor([[-0.0577,  0.0047, -0.0702,  ...,  0.0222,  0.1260,  0.0865],\n" in a03
    assert "        [ 0.0790,  0.1343, -0.0293,  ...,  0.0344, -0.0971, -0.0509]],\n" in a03
    assert "model(X): tensor([[-0.1262,  0.1080, -0.1792]], grad_fn=<AddmmBackward0>)\n" \
           "model(X) under torch.no_grad(): tensor([[-0.1262,  0.1080, -0.1792]])\n" \
           "torch.softmax(model(X), dim=1): tensor([[0.3113, 0.3934, 0.2952]])\n" in a03


def test_a04_data_and_loaders(runs):
    a04 = out(runs, "a04_dataloaders.py")
    assert ("X_train:\ntensor([[-1.2000,  3.1000],\n        [-0.9000,  2.9000],\n"
            "        [-0.5000,  2.6000],\n        [ 2.3000, -1.1000],\n        [ 2.7000, -1.5000]])"
            "\ny_train: tensor([0, 0, 0, 1, 1])\nlen(train_ds): 5\n") in a04  # five labels
    assert section(a04, "6 DataLoader: shuffled").endswith(
        "Batch 1: tensor([[ 2.3000, -1.1000],\n        [-0.9000,  2.9000]]) tensor([1, 0])\n"
        "Batch 2: tensor([[-1.2000,  3.1000],\n        [-0.5000,  2.6000]]) tensor([0, 0])\n"
        "Batch 3: tensor([[ 2.7000, -1.5000]]) tensor([1])\n")
    assert section(a04, "6 DataLoader with drop_last=True").endswith(
        "Batch 1: tensor([[-1.2000,  3.1000],\n        [-0.5000,  2.6000]]) tensor([0, 0])\n"
        "Batch 2: tensor([[ 2.3000, -1.1000],\n        [-0.9000,  2.9000]]) tensor([1, 0])\n")
    assert section(a04, "6 The test loader").endswith(
        "Batch 1: tensor([[-0.8000,  2.8000],\n        [ 2.6000, -1.6000]]) tensor([0, 1])\n")
    workers = section(a04, "6 num_workers")
    assert "num_workers=0 loads every batch in the main process" in workers
    assert "On macOS, Windows and Linux from Python 3.14 (spawn, forkserver)" in workers
    assert "through 2 workers" in workers and workers.endswith(
        "Batch 3: tensor([[ 2.7000, -1.5000]]) tensor([1])\n")


@pytest.mark.stress
def test_a04_workers_started_by_spawn_give_the_same_batches(runs, tmp_path):
    """macOS and Windows start DataLoader workers by spawn (Linux forks): simulated here by a
    shim that makes spawn the start method; the whole output must not change."""
    result = run_script("a04_dataloaders.py", cwd=tmp_path, env=clean_env("spawn_start"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == runs("a04_dataloaders.py").stdout
    assert "Dataset\ndefined in a notebook cell fails there" in result.stdout


@pytest.mark.stress
def test_a08_with_a_learners_num_workers_runs_where_workers_are_spawned(runs, tmp_path):
    """Section 6 invites num_workers > 0: in a08, whose code is under `if __name__ ==
    "__main__":`, spawned workers (macOS, Windows) import it without starting anew
    (TROUBLESHOOTING.md: the bootstrapping phase)."""
    script = copy_of("a08_ddp_torchrun.py", tmp_path, {"        drop_last=True,\n":
                                                       "        drop_last=True,\n"
                                                       "        num_workers=2,\n"})
    result = run([sys.executable, str(script)], tmp_path, clean_env("spawn_start"))
    assert result.returncode == 0, result.stderr
    assert loss_lines(result.stdout) == loss_lines(runs("a08_ddp_torchrun.py").stdout)


@pytest.fixture(scope="module")
def a05(runs):
    return runs("a05_training_loop.py")


def test_a05_section_7_six_loss_lines(a05):
    assert a05.returncode == 0, a05.stderr
    assert loss_lines(a05.stdout) == TUTORIAL_LOSS_LINES


def test_a05_section_7_predictions(a05):
    out = a05.stdout
    assert ("Logits:\ntensor([[ 2.8569, -4.1618],\n        [ 2.5382, -3.7548],\n"
            "        [ 2.0944, -3.1820],\n        [-1.4814,  1.4816],\n"
            "        [-1.7176,  1.7342]])\n") in out
    probas = out[out.index("(softmax):\n"):out.index("argmax")]
    # torch 2.4 pads sci_mode=False numbers more widely than 2.13; the digits are the same
    assert "".join(probas.split()) == (
        "(softmax):tensor([[0.9991,0.0009],[0.9982,0.0018],[0.9949,0.0051],"
        "[0.0491,0.9509],[0.0307,0.9693]])")
    assert "argmax of the probabilities: tensor([0, 0, 0, 1, 1])\n" in out
    assert "argmax of the logits: tensor([0, 0, 0, 1, 1])\n" in out
    assert "predictions == y_train: tensor([True, True, True, True, True])\n" in out
    assert "torch.sum(predictions == y_train): tensor(5)\n" in out
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in section(out, "7 compute_accuracy")


def test_the_texts_constants_are_the_ones_a_learner_edits(tmp_path, capsys):
    """`num_epochs = 3`, `lr=0.5` and `batch_size=2` stand in the code of a05, a07 and a08, as
    in the text: a learner's edit of each changes the run (no flag overrides them)."""
    for script in SCRIPTS[4:]:
        assert (ROOT / script).read_text(encoding="utf-8").count("lr=0.5)") == 1, script
    for script in ("a05_training_loop.py", "a07_gpu_single.py", "a08_ddp_torchrun.py"):
        source = (ROOT / script).read_text(encoding="utf-8")
        assert source.count("    num_epochs = 3\n") == 1, script
    edits = {"num_epochs = 3\n": "num_epochs = 1\n", "lr=0.5)": "lr=0.05)"}
    a05 = copy_of("a05_training_loop.py", tmp_path / "a05", edits)
    a08 = copy_of("a08_ddp_torchrun.py", tmp_path / "a08", edits | {
        "        batch_size=2,\n        shuffle=False,  # NEW": "        batch_size=5,\n"
                                                           "        shuffle=False,  # NEW"})
    code, out, err = run_main(str(a05), [], capsys)
    assert code == 0, err
    assert [line[:-4] for line in loss_lines(out)] == \
        [line[:-4].replace("/003", "/001") for line in TUTORIAL_LOSS_LINES[:2]]
    assert loss_lines(out)[1][-4:] != TUTORIAL_LOSS_LINES[1][-4:]  # lr=0.05
    torch.set_printoptions(profile="default", sci_mode=None)  # as a05 left them
    code, out, err = run_main(str(a08), [], capsys)
    assert code == 0, err
    assert [line[:-4] for line in loss_lines(out)] == \
        ["[CPU0] Epoch: 001/001 | Batchsize 005 | Train/Val Loss: "]


def test_a_label_beyond_the_models_outputs_keeps_its_traceback(tmp_path, capsys):
    """A learner's num_outputs=1 (or a third class in the labels): cross_entropy's own error,
    with the line that raised it (TROUBLESHOOTING.md says what it means)."""
    a05 = copy_of("a05_training_loop.py", tmp_path, {
        "NeuralNetwork(num_inputs=2, num_outputs=2)": "NeuralNetwork(num_inputs=2, num_outputs=1)"})
    with pytest.raises(IndexError, match="Target 1 is out of bounds"):
        run_main(str(a05), [], capsys)


@pytest.fixture(scope="module")
def a06(runs):
    return runs("a06_save_load.py")


def test_a06_section_8_saves_loads_and_predicts_the_same(a06):
    assert a06.returncode == 0, a06.stderr
    assert loss_lines(a06.stdout) == TUTORIAL_LOSS_LINES
    text = section(a06.stdout, "8 Saving and loading models")
    assert "===\n<All keys matched successfully>\nThe model restored from model.pth gives the " \
        "trained model's logits exactly: True\n" in text
    assert "Predicted classes: tensor([0, 0, 0, 1, 1])\n" in text
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in text


def test_a06_file_holds_a05s_trained_weights(a06, capsys, monkeypatch):
    """Tensor for tensor: a06 saves what a05's loop trains (the same seed, the same loop)."""
    import a05_training_loop
    trained = []
    monkeypatch.setattr(a05_training_loop.plots, "plot_boundary",
                        lambda model, path: trained.append(model))
    a05_training_loop.main()
    capsys.readouterr()
    model, = trained
    saved = torch.load(a06.cwd / "model.pth", weights_only=True)
    assert list(saved) == list(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert torch.equal(saved[name], tensor), name


def test_a06_load_restores_without_training(a06, capsys, monkeypatch):
    monkeypatch.chdir(a06.cwd)
    code, out, err = run_main("a06_save_load.py", ["--load", "model.pth"], capsys)
    assert (code, loss_lines(out)) == (0, []), err
    assert "<All keys matched successfully>\nPredicted classes: tensor([0, 0, 0, 1, 1])\n" \
        "Training accuracy: 1.0\nTest accuracy: 1.0\n" in out


SECTIONS = ["1.3", "Sections 3 and 4", "Section 5", "Section 6", "Section 7", "Section 8",
            "Sections 9.1 and 9.2", "Section 9.3"]


@pytest.mark.parametrize("script, number", list(zip(SCRIPTS, SECTIONS, strict=True)))
def test_help_names_the_section_and_every_default(script, number, capsys):
    code, out, _ = run_main(script, ["--help"], capsys)
    assert code == 0
    assert number in out and "PyTorch in One Hour" in out
    blocks = re.split(r"\n  (?=-)", out.split("options:")[1])[1:]
    assert blocks and all("default" in block for block in blocks if "--help" not in block)


@pytest.mark.parametrize("script", [name for name in SCRIPTS if name != "a07_gpu_single.py"])
def test_each_script_runs_alone_from_another_folder_and_leaves_no_litter(script, runs):
    """(a07: test_gpu_articles.py, whose run of a07 is its only one)"""
    result = runs(script)
    assert result.returncode == 0, result.stderr
    assert re.search(r"=== \d", result.stdout), "no numbered section heading"
    assert [path.name for path in result.cwd.iterdir()] == \
        (["model.pth"] if script.startswith("a06") else [])


def test_a08_as_one_plain_process_prints_the_published_scripts_losses(runs):
    """The published script's own figures on torch 2.13's CPU (the text's are a GPU's)."""
    out = runs("a08_ddp_torchrun.py").stdout
    assert loss_lines(out) == [f"[CPU0] Epoch: 00{epoch}/003 | Batchsize 002 | Train/Val Loss: "
                               f"{loss}" for epoch, loss in zip([1, 1, 2, 2, 3, 3], [
                                   "0.66", "0.33", "0.10", "0.07", "0.04", "0.01"], strict=True)]
    assert "[CPU0] Training accuracy 1.0\n[CPU0] Test accuracy 1.0\n" in out
    assert "Parameters identical in all 1 processes: True" in out
    # where the learner compares them, the one note that the blog's digits differ, and why
    note = out.index("0.62, 0.32, 0.11, ... in one process, with torch 2.0.1")
    assert out.count("0.62, 0.32") == 1 and note < out.index("[CPU0] Epoch: 001/003")
    assert "0.66, 0.33, 0.10, ..." in out[note:out.index("[CPU0] Epoch: 001/003")]


def test_a08_on_a_cpu_pins_no_memory_and_so_gives_no_warning(runs):
    """A CPU-only machine: torch warns for every loader that pins; a08 pins only for NCCL
    (test_a08.py), so its run shows no such line."""
    assert "pin_memory=torch.cuda.is_available()" in entry("'pin_memory' argument is set")
    result = runs("a08_ddp_torchrun.py")
    assert result.returncode == 0, result.stderr
    assert "'pin_memory' argument is set as true" not in result.stderr


def test_walkthrough_stops_at_the_first_failure(tmp_path, monkeypatch, capsys):
    from common import walkthrough
    (tmp_path / "first.py").write_text("print('first ran')\n")
    (tmp_path / "broken.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "never.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w')\n")
    monkeypatch.setattr(walkthrough, "ROOT", tmp_path)
    monkeypatch.setattr(walkthrough, "STEPS", [("python", "first.py"), ("python", "broken.py"),
                                               ("python", "never.py")])
    monkeypatch.setattr(sys, "argv", ["walkthrough"])
    assert walkthrough.main() == 1
    assert "Walkthrough stopped: broken.py failed (exit status 3)." in capsys.readouterr().err
    assert not (tmp_path / "RAN").exists()


def test_a_notebook_calling_main(monkeypatch, capsys, tmp_path):
    """A Jupyter kernel's argv is its own (pytorch/examples#369): main() reads none of it, nor
    does any function but __main__ (a08's flags arrive as keywords), and runs the tutorial's
    defaults, as the README's cell shows."""
    import a05_training_loop
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["/usr/lib/python3/ipykernel_launcher.py", "-f",
                                      "kernel-1.json", "--snapshot", "s.pt", "--plot", "p.png"])
    a05_training_loop.main()
    assert loss_lines(capsys.readouterr().out) == TUTORIAL_LOSS_LINES
    torch.set_printoptions(profile="default", sci_mode=None)
    import a08_ddp_torchrun  # one process, as a cell can run it, seeded as its __main__ is
    torch.manual_seed(123)
    a08_ddp_torchrun.main(0, 1, 1)
    assert loss_lines(capsys.readouterr().out) == [
        f"[CPU0] Epoch: 001/001 | Batchsize 002 | Train/Val Loss: {loss}" for loss in
        ("0.66", "0.33")]
    assert list(tmp_path.iterdir()) == []  # no --snapshot, no --plot read from the argv
