"""a05 (section 7, training loop) and a06 (section 8, saving and loading)."""

import sys

import pytest

from conftest import run_main, run_script, section

TUTORIAL_LOSS_LINES = [
    "Epoch: 001/003 | Batch 000/002 | Train/Val Loss: 0.75",
    "Epoch: 001/003 | Batch 001/002 | Train/Val Loss: 0.65",
    "Epoch: 002/003 | Batch 000/002 | Train/Val Loss: 0.44",
    "Epoch: 002/003 | Batch 001/002 | Train/Val Loss: 0.13",
    "Epoch: 003/003 | Batch 000/002 | Train/Val Loss: 0.03",
    "Epoch: 003/003 | Batch 001/002 | Train/Val Loss: 0.00",
]


def loss_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "Train/Val Loss" in line]


@pytest.fixture(scope="module")
def a05(default_run):
    return default_run("a05_training_loop.py")


def test_a05_section_7_six_loss_lines(a05):
    assert a05.returncode == 0, a05.stderr
    assert loss_lines(a05.stdout) == TUTORIAL_LOSS_LINES


def test_a05_section_7_logits(a05):
    assert ("Logits:\ntensor([[ 2.8569, -4.1618],\n        [ 2.5382, -3.7548],\n"
            "        [ 2.0944, -3.1820],\n        [-1.4814,  1.4816],\n"
            "        [-1.7176,  1.7342]])\n") in a05.stdout


def test_a05_section_7_softmax_without_sci_mode(a05):
    text = section(a05.stdout, "7 Predictions")
    probas = text[text.index("(softmax):\n"):text.index("argmax")]
    # torch 2.4 pads sci_mode=False numbers more widely than 2.13; the digits are the same
    assert "".join(probas.split()) == (
        "(softmax):tensor([[0.9991,0.0009],[0.9982,0.0018],[0.9949,0.0051],"
        "[0.0491,0.9509],[0.0307,0.9693]])")


def test_a05_section_7_argmax_and_correct_count(a05):
    out = a05.stdout
    assert "argmax of the probabilities: tensor([0, 0, 0, 1, 1])\n" in out
    assert "argmax of the logits: tensor([0, 0, 0, 1, 1])\n" in out
    assert "predictions == y_train: tensor([True, True, True, True, True])\n" in out
    assert "torch.sum(predictions == y_train): tensor(5)\n" in out


def test_a05_section_7_compute_accuracy(a05):
    text = section(a05.stdout, "7 compute_accuracy")
    assert "Training accuracy: 1.0\n" in text
    assert "Test accuracy: 1.0\n" in text


def test_a05_flags_change_the_run(capsys):
    code, out, err = run_main("a05_training_loop.py", ["--epochs", "1", "--batch-size", "1"],
                              capsys)
    assert code == 0, err
    lines = loss_lines(out)
    assert len(lines) == 5
    assert lines[0].startswith("Epoch: 001/001 | Batch 000/005 | Train/Val Loss: ")


@pytest.fixture(scope="module")
def a06(default_run):
    result = default_run("a06_save_load.py")
    return result.cwd, result


def test_a06_section_8_trains_saves_and_matches_keys(a06):
    cwd, result = a06
    assert result.returncode == 0, result.stderr
    assert loss_lines(result.stdout) == TUTORIAL_LOSS_LINES
    text = section(result.stdout, "8 Saving and loading models")
    assert "Saved model.state_dict() to model.pth\n" in text
    assert "<All keys matched successfully>\n" in text
    assert (cwd / "model.pth").stat().st_size > 0


def test_a06_section_8_restored_model_predicts_the_same(a06):
    text = section(a06[1].stdout, "8 Saving and loading models")
    assert "Restored model gives the trained model's logits exactly: True\n" in text
    assert "Predicted classes: tensor([0, 0, 0, 1, 1])\n" in text
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in text


def test_a06_saved_and_restored_models_equal_the_trained_one(a06, capsys):
    """Tensor for tensor: the file holds the trained weights, and loading puts them back."""
    import torch

    import a05_training_loop
    import a06_save_load
    cwd, _ = a06
    trained = a05_training_loop.train_tutorial_model(a05_training_loop.parse_args([])).model
    saved = torch.load(cwd / "model.pth", weights_only=True)
    restored = a06_save_load.load(str(cwd / "model.pth")).state_dict()
    capsys.readouterr()
    expected = trained.state_dict()
    assert list(saved) == list(restored) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(saved[name], tensor), name
        assert torch.equal(restored[name], tensor), name


def test_a06_load_restores_without_training(a06):
    cwd, _ = a06
    result = run_script("a06_save_load.py", "--load", "model.pth", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert loss_lines(result.stdout) == []
    assert "<All keys matched successfully>\nPredicted classes: tensor([0, 0, 0, 1, 1])\n" \
        "Training accuracy: 1.0\nTest accuracy: 1.0\n" in result.stdout


def test_a06_writes_where_path_says(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "sub" / "weights.pth"
    target.parent.mkdir()
    code, out, err = run_main("a06_save_load.py", ["--path", str(target)], capsys)
    assert code == 0, err
    assert f"Saved model.state_dict() to {target}\n" in out
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["weights.pth"]


def test_a05_plot_writes_a_png(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 0, err
    assert "Saved the plot to plot.png\n" in out
    data = (tmp_path / "plot.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert 10_000 < len(data) < 1_000_000


def test_a05_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        'a05_training_loop.py: error: argument --plot: needs matplotlib: pip install '
        '".[plot]" in this repository\'s environment, or python -m pip install matplotlib with '
        'the Python that runs this script')
    assert out == ""
    assert not (tmp_path / "plot.png").exists()
