"""Faults a user can cause, run as a user would: saves that never damage what is there, runs
that stop before the work (or with nothing written) when something is wrong, signals obeyed at
any moment, every launch variable checked, honest resumes, one line for every number and file."""

import errno
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import (
    DDP_ENDING,
    ROOT,
    as_torchrun_process,
    clean_env,
    free_port,
    needs_sigint,
    needs_torchrun,
    rank_env,
    read_until,
    run,
    run_main,
    run_script,
    start_process,
    torchrun_command,
)

LONG_NAME = "m" * 250 + ".pth"  # fits a file system's 255 bytes, with no room for more


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# 1. Saving never damages what is there

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (POSIX)")
def test_a06_refuses_to_replace_what_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out, err = run_main("a06_save_load.py", ["--path", str(fifo)], capsys)
    assert code == 2
    assert err.splitlines()[-1].endswith(
        f"argument --path: {fifo} is not a regular file; give the path of a file to write")
    assert "Epoch" not in out  # refused before training
    assert fifo.is_fifo()


def test_a06_follows_a_symbolic_link_and_replaces_its_target(tmp_path, capsys, monkeypatch):
    target = tmp_path / "real.pth"
    target.write_bytes(b"old")
    (tmp_path / "link.pth").symlink_to(target)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("a06_save_load.py", ["--path", "link.pth"], capsys)
    assert code == 0, err
    assert (tmp_path / "link.pth").is_symlink()
    assert torch.load(target, weights_only=True).keys() == torch.nn.Sequential().state_dict(
        ).keys() | {f"layers.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.pth", "real.pth"]


def test_a06_saves_under_the_longest_name_a_folder_takes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("a06_save_load.py", ["--path", LONG_NAME], capsys)
    assert code == 0, err
    assert (tmp_path / LONG_NAME).stat().st_size > 0
    code, _, err = run_main("a06_save_load.py", ["--path", "x" + LONG_NAME + "x" * 5], capsys)
    assert code == 2
    assert "cannot write it (File name too long); choose another --path" in err


# 2. Nothing worse replaces a saved model

@pytest.mark.parametrize("argv, exit_code, message", [
    (["--batch-size", "9"], 2, "argument --batch-size: 9 is larger than the 5 training examples"),
    (["--lr", "1e30"], 1, "error: the training loss became nan: the weights diverged (--lr too "
                          "large?), and nothing was saved; try a smaller --lr"),
])
def test_a06_never_saves_a_worse_model_over_a_good_one(argv, exit_code, message, tmp_path,
                                                       capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main("a06_save_load.py", [], capsys)[0] == 0
    good = (tmp_path / "model.pth").read_bytes()
    code, _, err = run_main("a06_save_load.py", argv, capsys)
    assert code == exit_code
    assert message in err.splitlines()[-1]
    assert (tmp_path / "model.pth").read_bytes() == good


@pytest.mark.parametrize("script", ["a05_training_loop.py", "a07_gpu_single.py",
                                    "a08_ddp_torchrun.py"])
def test_a_diverged_run_stops_with_one_line(script, capsys):
    code, _, err = run_main(script, ["--lr", "1e30"], capsys)
    assert code == 1
    assert one_error_line(err).startswith("error: the training loss became nan")


def test_a08_diverged_with_a_snapshot_says_what_it_holds_and_advice_that_works(tmp_path, capsys):
    """--lr 500 diverges in its third epoch: the snapshot holds the two before (whole), and
    the message says so, with advice that the next run accepts (before: "nothing was saved;
    try a smaller --lr", and --lr 0.05 on that snapshot was refused)."""
    snapshot = tmp_path / "s.pt"
    code, _, err = run_main("a08_ddp_torchrun.py", ["--lr", "500", "--snapshot", str(snapshot)],
                            capsys)
    assert code == 1
    held = torch.load(snapshot, weights_only=True)["epochs_completed"]
    assert held == 2
    assert one_error_line(err) == (
        f"error: the training loss became nan: the weights diverged (--lr too large?), and "
        f"{snapshot} keeps the 2 epoch(s) before, made with --lr 500.0: for a smaller --lr, "
        f"give another --snapshot path (or move {snapshot} away)")
    code, _, err = run_main("a08_ddp_torchrun.py", ["--lr", "0.05", "--snapshot",
                                                    str(tmp_path / "other.pt")], capsys)
    assert code == 0, err


# 3. Signals at any moment

def a08_waiting_for_a_peer(tmp_path: Path) -> subprocess.Popen:
    """Process 0 of 2, whose peer never comes: it waits inside torch's C++ store code."""
    env = rank_env(0, free_port())
    process = start_process([sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--timeout",
                             "120"], tmp_path, env)
    read_until(process, "Number of GPUs available")
    time.sleep(1)  # into the wait for the peer
    return process


@needs_sigint
@pytest.mark.parametrize("signum, code, line", [
    pytest.param(signal.SIGINT, 130, "Interrupted (Ctrl-C): stopped before the end; files "
                 "already written are whole.", marks=pytest.mark.stress),  # one thread ends both
    (signal.SIGTERM, 143, "Stopped (SIGTERM, e.g. a preempted job): files already written are "
                          "whole; with --snapshot, the same command resumes from the last epoch."),
])
def test_a08_obeys_a_signal_while_waiting_for_its_peers(signum, code, line, tmp_path):
    process = a08_waiting_for_a_peer(tmp_path)
    start = time.monotonic()
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - start < 5
    assert process.returncode == code
    assert stderr.strip().splitlines() == [line]


# 4. The launch environment, checked before anything waits

LAUNCH_CASES = [
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE is set but RANK is not; set both"),
    ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not; set both"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not a whole number from 0 to 1"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK='2' is not a whole number from 0 to 1"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a whole number >= 1"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, "RANK and WORLD_SIZE are set but MASTER_ADDR is not"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
     "MASTER_PORT is not set; set it (a whole number from 1 to 65535)"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"},
     "MASTER_PORT='99999' is not a whole number from 1 to 65535"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "abc"},
     "MASTER_PORT='abc' is not a whole number from 1 to 65535"),
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
      "MASTER_PORT": "1"}, "LOCAL_RANK is not set; set it (a whole number from 0 to 1)"),
    ({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "1",
      "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "LOCAL_WORLD_SIZE='8' is not a whole number from 1 to 4"),
]


@pytest.mark.parametrize("variables, message", LAUNCH_CASES,
                         ids=[" ".join(f"{k}={v}" for k, v in c[0].items()) for c in LAUNCH_CASES])
def test_a08_bad_launch_variable_is_one_line_at_once(variables, message, capsys, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    start = time.monotonic()
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert time.monotonic() - start < 5
    assert code == 1
    assert one_error_line(err).startswith(f"error: {message}")  # said by rank 1 too
    assert "Epoch" not in out


def test_a08_too_short_timeout_is_named_as_one(monkeypatch, capsys):
    as_torchrun_process(monkeypatch, 0, free_port())
    code, _, err = run_main("a08_ddp_torchrun.py", ["--timeout", "1"], capsys)
    assert code == 1
    assert "waited --timeout for the other processes" in one_error_line(err)
    assert "only 1 of 2 joined" in err and "firewall" not in err


# 5. Honest resumes

def test_a08_resume_with_other_settings_names_them(tmp_path, capsys):
    snapshot = str(tmp_path / "snap.pt")
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "1"],
                    capsys)[0] == 0
    code, _, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--lr", "0.1",
                                                    "--batch-size", "1"], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"error: {snapshot} was made with --lr 0.5 (asked: 0.1), --batch-size 2 (asked: 1): "
        f"resume with its settings, or move it away to start afresh (the number of processes "
        f"may change)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap.pt"]  # no lock file left


def test_a08_resume_checks_every_setting_that_changes_the_computation(tmp_path, capsys):
    """--num-samples left out is its default, the tutorial's 5: naming it changes nothing;
    --amp changes what a run computes, and is checked like --lr."""
    snapshot = str(tmp_path / "snap.pt")
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "1"],
                    capsys)[0] == 0
    code, _, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--num-samples",
                                                    "10"], capsys)
    assert code == 1
    assert one_error_line(err).startswith(
        f"error: {snapshot} was made with --num-samples 5 (asked: 10): resume with its")
    code, _, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--amp", "bf16"],
                            capsys)
    assert code == 1
    assert one_error_line(err).startswith(
        f"error: {snapshot} was made with no --amp (asked: bf16): resume with its")
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "2",
                                                      "--num-samples", "5"], capsys)
    assert code == 0, err
    assert "[CPU0] Resuming from epoch 1" in out


@pytest.fixture(scope="module")
def a08_snapshot(tmp_path_factory) -> Path:
    """A snapshot as a08 writes it, after one epoch (in this process, as run_main runs it)."""
    import a08_ddp_torchrun
    snapshot = tmp_path_factory.mktemp("snapshot") / "snap.pt"
    argv, sys.argv = sys.argv, ["a08_ddp_torchrun.py", "--snapshot", str(snapshot), "--epochs",
                                "1", "--device", "cpu"]
    try:
        run(a08_ddp_torchrun.main, DDP_ENDING)
    finally:
        sys.argv = argv
    return snapshot


@pytest.mark.parametrize("change, message", [
    (lambda s: s | {"epochs_completed": "1"}, "not an a08 snapshot"),
    (lambda s: s | {"epochs_completed": -1}, "not an a08 snapshot"),
    (lambda s: s | {"model": [1, 2]}, "not an a08 snapshot"),
    (lambda s: s | {"settings": "--lr 0.5"}, "not an a08 snapshot"),
    (lambda s: s | {"model": {"layers.0.weight": torch.zeros(3)}}, "does not fit this model"),
    (lambda s: s | {"optimizer": s["optimizer"] | {"param_groups": [
        s["optimizer"]["param_groups"][0] | {"lr": "0.5"}]}}, "does not fit this model"),
    (lambda s: s | {"optimizer": {"state": {}, "param_groups": 7}}, "does not fit this model"),
], ids=["epochs as text", "negative epochs", "model a list", "settings as text",
        "a weight of another shape", "lr as text", "param_groups a number"])
def test_a08_snapshot_with_fields_a08_never_wrote_is_one_line(change, message, a08_snapshot,
                                                              tmp_path, capsys):
    """A file that torch loads with weights_only, but not as a08 wrote it (crafted, or another
    program's): one line before any training, never a traceback from a later step."""
    snapshot = tmp_path / "snap.pt"
    torch.save(change(torch.load(a08_snapshot, weights_only=True)), snapshot)
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot), "--epochs",
                                                      "2"], capsys)
    assert code == 1
    assert one_error_line(err).startswith(f"error: {snapshot}: {message}")
    assert "Epoch:" not in out


@pytest.mark.skipif(sys.platform == "win32", reason="the snapshot lock uses fcntl (POSIX)")
def test_a08_lock_file_that_cannot_be_opened_is_one_line(tmp_path, capsys):
    """A lock file left where this user cannot open it (another user's, in a shared folder;
    here a folder of that name, which root cannot open either)."""
    snapshot = tmp_path / "snap.pt"
    (tmp_path / ".snap.pt.lock").mkdir()
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot)], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"error: {tmp_path / '.snap.pt.lock'}: cannot open the snapshot's lock file (Is a "
        f"directory); remove it, or give another --snapshot path")
    assert "Epoch:" not in out


def test_a_path_the_terminal_cannot_show_is_escaped_not_a_traceback(tmp_path):
    """A non-ASCII file name, printed to an output that only takes ASCII: the file is saved
    and the line says where, with the name escaped."""
    env = clean_env() | {"PYTHONIOENCODING": "ascii"}
    result = run_script("a06_save_load.py", "--path", "mod\u00e8l.pth", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "Saved model.state_dict() to mod\\xe8l.pth\n" in result.stdout
    assert (tmp_path / "mod\u00e8l.pth").stat().st_size > 0


def test_a08_fewer_epochs_than_done_trains_nothing_and_says_so(tmp_path, capsys):
    snapshot = str(tmp_path / "snap.pt")
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "3"],
                    capsys)[0] == 0
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "2"],
                              capsys)
    assert code == 0, err
    assert (f"[CPU0] {snapshot} holds 3 finished epochs, all that --epochs 2 asks for: nothing "
            f"left to train (a larger --epochs trains on)\n") in out
    assert "Epoch:" not in out
    assert "[CPU0] Training accuracy 1.0" in out


@pytest.mark.skipif(sys.platform == "win32", reason="the snapshot lock uses fcntl (POSIX)")
def test_a08_second_run_on_a_live_snapshot_stops_at_start(tmp_path, capsys):
    snapshot = tmp_path / "snap.pt"
    first = subprocess.Popen([sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--snapshot",
                              str(snapshot), "--epochs", "100000"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=clean_env())
    try:
        deadline = time.monotonic() + 60
        while not snapshot.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot)], capsys)
        assert code == 1
        assert one_error_line(err) == (
            f"error: {snapshot}: another run is using this snapshot; wait for it to end, or "
            f"give this one another --snapshot path")
        assert "Epoch:" not in out
    finally:
        first.kill()
        first.communicate()


# 6. Fail before the work

@pytest.mark.parametrize("script, argv, message", [
    ("a08_ddp_torchrun.py", ["--snapshot", "{tmp}"], "argument --snapshot: {tmp} is a folder"),
    ("a05_training_loop.py", ["--plot", "{tmp}/no/such/plot.png"],
     "argument --plot: {tmp}/no/such/plot.png: cannot write it (No such file or directory)"),
])
def test_paths_a_run_will_write_are_checked_before_it_trains(script, argv, message, tmp_path,
                                                             capsys):
    pytest.importorskip("matplotlib") if "--plot" in argv else None
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    code, out, err = run_main(script, argv, capsys)
    assert code == 2
    assert message.format(tmp=tmp_path) in err.splitlines()[-1]
    assert "Epoch" not in out


def nobody():
    """The user 'nobody', where this test runs as root and nobody can run this Python."""
    try:
        import pwd  # POSIX only
        user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    except (ImportError, KeyError):
        return None
    try:
        subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True,
                       preexec_fn=lambda: os.setuid(user.pw_uid)) if user else None
    except (OSError, subprocess.CalledProcessError):
        return None
    return user


@pytest.mark.skipif(nobody() is None, reason="needs root, and a user 'nobody' who can run this "
                                             "Python and its torch (not where they lie under "
                                             "/root) to act as a second user")
def test_files_another_user_cannot_touch_are_one_line(tmp_path):
    """As the user 'nobody': a folder it cannot write, a checkpoint it cannot read."""
    user = nobody()
    tmp_path.chmod(0o755)
    (tmp_path / "model.pth").write_bytes(b"PK\x03\x04 not readable by nobody")
    (tmp_path / "model.pth").chmod(0o600)

    def as_nobody(*argv):
        return subprocess.run([sys.executable, str(ROOT / "a06_save_load.py"), *argv],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env=clean_env(), preexec_fn=lambda: os.setuid(user.pw_uid))

    write = as_nobody("--path", "mine.pth")
    assert write.returncode == 2
    assert write.stderr.splitlines()[-1].endswith(
        "argument --path: mine.pth: cannot write it (Permission denied); choose another --path")
    read = as_nobody("--load", "model.pth")
    assert read.returncode == 1
    assert one_error_line(read.stderr) == "error: model.pth: cannot read it (Permission denied)"


# 7. One line for every number and file a user can get wrong

@pytest.mark.parametrize("script, argv, message", [
    ("a05_training_loop.py", ["--lr", "1e308"], "argument --lr: '1e308' is too large"),
    ("a07_gpu_single.py", ["--lr", "1e308"], "argument --lr: '1e308' is too large"),
    ("a08_ddp_torchrun.py", ["--lr", "1e308"], "argument --lr: '1e308' is too large"),
    ("a08_ddp_torchrun.py", ["--timeout", "1e300"], "argument --timeout: '1e300' is too large"),
    ("a05_training_loop.py", ["--seed", str(2**64)], "argument --seed: '18446744073709551616' "
                                                     "is too large"),
])
def test_numbers_torch_cannot_hold_are_usage_errors(script, argv, message, capsys):
    code, _, err = run_main(script, argv, capsys)
    assert code == 2
    assert message in err.splitlines()[-1]


@pytest.mark.parametrize("script, argv", [
    ("a08_ddp_torchrun.py", ["--num-samples", str(10**12)]),
    ("a07_gpu_single.py", ["--benchmark", "--sizes", str(10**7), "--device", "cpu"]),
])
def test_sizes_that_cannot_be_allocated_are_one_line(script, argv, capsys):
    code, _, err = run_main(script, argv, capsys)
    assert code == 1
    assert one_error_line(err).startswith("error: not enough memory for what the flags ask")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_to_a_full_device_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, str(ROOT / "a01_tensors.py")], cwd=tmp_path,
                                stdout=full, stderr=subprocess.PIPE, text=True, env=clean_env())
    assert result.returncode == 1
    assert one_error_line(result.stderr).startswith("error: no space left on the device")


def test_a06_names_a_ddp_state_dict_and_an_a08_snapshot(tmp_path, capsys):
    from common import NeuralNetwork

    import torch
    ddp_keys = {f"module.{k}": v for k, v in NeuralNetwork(2, 2).state_dict().items()}
    torch.save(ddp_keys, tmp_path / "ddp.pth")
    code, _, err = run_main("a06_save_load.py", ["--load", str(tmp_path / "ddp.pth")], capsys)
    assert code == 1
    assert "saved from a DistributedDataParallel model, whose keys start with 'module.'" \
        in one_error_line(err)
    snapshot = str(tmp_path / "snap.pt")
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "1"],
                    capsys)[0] == 0
    code, _, err = run_main("a06_save_load.py", ["--load", snapshot], capsys)
    assert code == 1
    assert f"{snapshot}: an a08 snapshot, not a model's state_dict" in one_error_line(err)


@pytest.mark.stress
@needs_torchrun
@pytest.mark.skipif(shutil.which("head") is None, reason="needs head")
def test_torchrun_piped_into_head_ends_promptly(tmp_path):
    """head stops reading after 3 lines: the process whose write fails ends; torchrun then
    sends SIGTERM to the other, which may be waiting in a collective, and it must obey."""
    command = " ".join(shlex.quote(part) for part in torchrun_command(
        2, "--epochs", "100000")) + " | head -3"
    start = time.monotonic()
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env=clean_env() | {"OMP_NUM_THREADS": "1"})
    assert time.monotonic() - start < 20
    assert result.stdout.splitlines()[1] == "=== 9.3 Training with multiple GPUs ==="


def test_plot_is_written_whole_or_not_at_all(tmp_path, monkeypatch, capsys):
    """The disk fills while the plot is written: the previous plot stays as it was, no
    temporary file is left, and the error is one line (as for a checkpoint)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plot.png").write_bytes(b"the previous plot")

    def savefig_on_a_full_disk(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", savefig_on_a_full_disk)
    code, _, err = run_main("a05_training_loop.py", ["--plot", "plot.png"], capsys)
    assert code == 1
    assert err.splitlines() == ["error: plot.png: cannot write it (No space left on device); "
                                "choose another --plot, or free some space"]
    assert (tmp_path / "plot.png").read_bytes() == b"the previous plot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


@pytest.mark.parametrize(("flags", "message"), [
    (["a05_training_loop.py", "--plot", "plots/"],
     "argument --plot: plots/ names a folder (it ends with /); give the path of a file"),
    (["a05_training_loop.py", "--plot", "loss.pdf"],
     "argument --plot: loss.pdf: the plot is a PNG; give a path ending in .png"),
    (["a06_save_load.py", "--path", "models/"],
     "argument --path: models/ names a folder (it ends with /); give the path of a file"),
])
def test_a_path_meant_as_a_folder_or_a_plot_not_png_is_refused(flags, message, tmp_path,
                                                                monkeypatch, capsys):
    """Before training: --plot plots/ trained, then failed; --path models/ wrote a file
    named models."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(flags[0], flags[1:], capsys)
    assert code == 2
    assert err.splitlines()[-1].endswith(message)
    assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_plot_without_png_suffix_is_a_png_at_that_path(tmp_path, monkeypatch, capsys):
    """matplotlib would write loss.png for `--plot loss`, while the script said `loss`."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main("a05_training_loop.py", ["--plot", "loss", "--epochs", "1"],
                              capsys)
    assert code == 0, err
    assert "Saved the plot to loss\n" in out
    assert [p.name for p in tmp_path.iterdir()] == ["loss"]
    assert (tmp_path / "loss").read_bytes().startswith(b"\x89PNG")
