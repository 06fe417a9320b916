"""A learner's mistakes before any work: a flag (exit 2), a launch variable (exit 1), --plot."""

import sys

import pytest

from conftest import WINDOWS, run_main

BAD_FLAGS = [
    ("a05_training_loop.py", ["--plot", "plot.jpg"], "argument --plot: plot.jpg: the plot is a "
                                                     "PNG; give a path ending in .png"),
    ("a05_training_loop.py", ["--lr", "0.1"], "unrecognized arguments: --lr 0.1"),  # retired
    ("a06_save_load.py", ["--path", "m.pth"], "unrecognized arguments: --path m.pth"),  # retired
    ("a06_save_load.py", ["--load"], "argument --load: expected one argument"),
    ("a07_gpu_single.py", ["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    ("a07_gpu_single.py", ["--device", "cuda"], "argument --device cuda: this machine has no "
                                                "usable CUDA GPU"),
    ("a07_gpu_single.py", ["--sizes", "64,0"], "argument --sizes: '0' is not a whole number"),
    ("a08_ddp_torchrun.py", ["--epochs", "1"], "unrecognized arguments: --epochs 1"),  # retired
    ("a08_ddp_torchrun.py", ["--spawn", "0"], "argument --spawn: '0' is not a whole number "
                                              "from 1 to 1e+09"),
    ("a08_ddp_torchrun.py", ["--timeout", "inf"], "argument --timeout: 'inf' is not a number"),
    ("a08_ddp_torchrun.py", ["--device", "cuda"], "argument --device cuda: " + (
        "on Windows the processes meet through gloo" if WINDOWS else  # GPU or none
        "this machine has no usable CUDA GPU")),
    ("a08_ddp_torchrun.py", ["--snapshot", "no/such/s.pt"], "argument --snapshot: "
                                                            "no/such/s.pt: cannot write there"),
]


@pytest.mark.parametrize("script, argv, message", BAD_FLAGS,
                         ids=[f"{s[:3]}{'='.join(a)}" for s, a, _ in BAD_FLAGS])
def test_a_bad_flag_is_one_usage_line_before_any_work(script, argv, message, tmp_path,
                                                      monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(script, argv, capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"{script}: error: {message}" or \
        err.splitlines()[-1].startswith(f"{script}: error: {message}"), err
    assert list(tmp_path.iterdir()) == []


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 2
    assert err.splitlines()[-1].endswith('argument --plot: needs matplotlib: pip install '
                                         '".[plot]" in the clone\'s environment')


def test_plot_with_a_matplotlib_that_cannot_load_says_how_to_upgrade(tmp_path, monkeypatch,
                                                                    capsys):
    """matplotlib 3.7 (built for NumPy 1) under NumPy 2: installed, but its import fails;
    `pip install ".[plot]"` would keep it."""
    (tmp_path / "site" / "matplotlib").mkdir(parents=True)
    (tmp_path / "site" / "matplotlib" / "__init__.py").write_text(
        'raise ImportError("numpy.core.multiarray failed to import")\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 2
    assert err.splitlines()[-1].endswith("argument --plot: matplotlib is installed but cannot "
                                         "load (numpy.core.multiarray failed to import): pip "
                                         "install -U matplotlib in the clone's environment")


def test_a05_plot_writes_a_png(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 0, err
    assert "Saved the plot to plot.png\n" in out
    data = (tmp_path / "plot.png").read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and 10_000 < len(data) < 1_000_000
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


LAUNCH = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
          "MASTER_PORT": "29500"}


@pytest.mark.parametrize("change, message", [
    ({"WORLD_SIZE": None}, "WORLD_SIZE is not set: set it to a whole number from 1 to 1000000"),
    ({"RANK": None}, "RANK is not set: set it to a whole number from 0 to 1"),
    ({"RANK": "2"}, "RANK='2': set it to a whole number from 0 to 1"),
    ({"RANK": "one"}, "RANK='one': set it to a whole number"),
    ({"MASTER_PORT": "99999"}, "MASTER_PORT='99999': set it to a whole number from 1 to 65535"),
    ({"MASTER_ADDR": None}, "RANK and WORLD_SIZE are set but MASTER_ADDR is not"),
    ({"LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "1"}, "LOCAL_RANK='1': set it to a whole number "
                                                   "from 0 to 0"),
])
def test_a_bad_launch_variable_is_one_line_before_any_process_waits(change, message,
                                                                    monkeypatch, capsys):
    for name, value in (LAUNCH | change).items():
        if value is not None:
            monkeypatch.setenv(name, value)
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert "or start a08 with torchrun" in err


@pytest.mark.parametrize("argv", [[], ["--spawn", "2"]])
def test_a_bad_master_port_outside_torchrun_is_one_line(argv, monkeypatch, capsys):
    """One plain process, or --spawn's, meets at a MASTER_PORT the learner set (the text keeps
    it): torch's ValueError inside every process had been its traceback."""
    monkeypatch.setenv("MASTER_PORT", "29500a")
    assert run_main("a08_ddp_torchrun.py", argv, capsys) == (1, "", (
        "error: MASTER_PORT='29500a': set it to a whole number from 1 to 65535, or unset it\n"))


def test_spawn_under_torchrun_is_a_usage_error(monkeypatch, capsys):
    for name, value in LAUNCH.items():
        monkeypatch.setenv(name, value)
    code, _, err = run_main("a08_ddp_torchrun.py", ["--spawn", "2"], capsys)
    assert code == 2
    assert "argument --spawn: torchrun started the processes already" in err


def test_only_rank_0_prints_a_usage_error(monkeypatch, capsys):
    for name, value in (LAUNCH | {"RANK": "1", "LOCAL_RANK": "1"}).items():
        monkeypatch.setenv(name, value)
    assert run_main("a08_ddp_torchrun.py", ["--timeout", "0"], capsys) == (2, "", "")
