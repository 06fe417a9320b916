"""a08 --snapshot: saved after every epoch by rank 0, resumed by the same command, by
torchrun's --max-restarts, and after a preemption; another run's settings said in one line."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import a08_ddp_torchrun as a08
from common import NeuralNetwork
from conftest import (
    CodeRunningPickle,
    a08_command,
    a08_with_epochs,
    clean_env,
    copy_of,
    descendants,
    free_port,
    lists_processes,
    posix_signals,
    process_table,
    run_main,
    run_together,
    start,
    torchrun_starts,
)


def epochs(stdout: str, rank: int = 0) -> list[int]:
    return [int(e) for e in re.findall(rf"^\[CPU{rank}\] Epoch: (\d+)/", stdout, re.M)]


@pytest.fixture
def one_process(monkeypatch, tmp_path):
    """In this process: a08 as one plain process (conftest gives it a free port), here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_run_resumes_after_the_last_saved_epoch_as_if_never_stopped(one_process, capsys,
                                                                       tmp_path_factory):
    """A run of 2 epochs (a learner's num_epochs = 2), then the text's 3: epoch 3 alone."""
    two = a08_with_epochs(tmp_path_factory.mktemp("two"), 2)
    code, out, err = run_main(str(two), ["--snapshot", "s.pt"], capsys)
    assert code == 0, err
    assert epochs(out) == [1, 1, 2, 2]
    assert torch.load("s.pt", weights_only=True)["epochs_completed"] == 2
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", "s.pt"], capsys)
    assert code == 0, err
    assert "Resuming from epoch 2 (s.pt): continuing with epoch 3 at the snapshot's lr=0.5\n" \
        in out
    assert epochs(out) == [3, 3]
    assert "[CPU0] Training accuracy 1.0" in out
    resumed = torch.load("s.pt", weights_only=True)
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", "whole.pt"], capsys)[0] == 0
    whole = torch.load("whole.pt", weights_only=True)
    assert resumed["epochs_completed"] == whole["epochs_completed"] == 3
    for name, tensor in whole["model"].items():
        assert torch.equal(resumed["model"][name], tensor), name
    assert sorted(p.name for p in one_process.iterdir()) == ["s.pt", "whole.pt"]
    code, out, _ = run_main("a08_ddp_torchrun.py", ["--snapshot", "s.pt"], capsys)
    assert "s.pt holds 3 finished epochs, all that num_epochs = 3 asks for: nothing left " \
           "to train (a larger num_epochs trains on)\n" in out
    assert (code, epochs(out)) == (0, [])


def test_a_snapshot_that_cannot_be_resumed_is_one_line(one_process, capsys):
    """Another program's file, a pickle that would run code: one line, before any training;
    the file stays as it was."""
    torch.save(NeuralNetwork(2, 2).state_dict(), "other.pt")
    torch.save({"model": CodeRunningPickle(one_process / "CODE_RAN")}, "evil.pt")
    expected = {
        "other.pt": "error: other.pt: not an a08 snapshot; move it away, or give another "
                    "--snapshot\n",
        "evil.pt": "error: evil.pt: refused: it holds Python objects, not only tensors, and "
                   "loading it could run code; load such files only from sources you trust "
                   "(weights_only=False)\n",
    }
    for name in expected:
        before = (one_process / name).read_bytes()
        code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", name], capsys)
        assert (code, err, epochs(out)) == (1, expected[name], [])
        assert (one_process / name).read_bytes() == before
    assert not (one_process / "CODE_RAN").exists()


LEARNERS_EDITS = {  # what the text invites a learner to change, and what a08 then says
    "wider": ("common/__init__.py", {"Linear(num_inputs, 30)": "Linear(num_inputs, 40)",
                                     "Linear(30, 20)": "Linear(40, 20)"},
              "the model's layers.0.weight is (30, 2) in the snapshot, (40, 2) in this script"),
    "adam": ("a08_ddp_torchrun.py", {"torch.optim.SGD(": "torch.optim.Adam("},
             "it was written by torch.optim.SGD, this script uses torch.optim.Adam"),
    "three classes": ("a08_ddp_torchrun.py", {"num_outputs=2)": "num_outputs=3)"},
                      "the model's layers.4.weight is (2, 20) in the snapshot, (3, 20) in this "
                      "script"),
    "compiled": ("a08_ddp_torchrun.py", {"    model.to(device)": "    model = torch.compile("
                                         "model.to(device))"},  # state_dict's keys; no compile
                 "this script's model is wrapped by torch.compile, its keys starting with "
                 "'_orig_mod.', the snapshot's not"),
}
MISFITS = [("wider", "torchrun 2"), ("adam", "torchrun 2"), ("wider", "spawn 2"),
           ("adam", "torchrun 1"), ("adam", "plain")]
MISFIT_LINE = ("error: s.pt does not fit this script ({}): give another --snapshot path, or "
               "delete s.pt to start afresh")


@torchrun_starts
@pytest.mark.stress
def test_a_snapshot_the_edited_script_no_longer_fits_is_one_line(one_process, capsys,
                                                                  tmp_path_factory):
    """A learner's copy of a08 (and common/), edited after the snapshot was written, run each
    way at once: rank 0's one line, the other processes silent, exit 1, no epoch trained, the
    snapshot untouched. (The same line in this process, by default: the next test.)"""
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", "s.pt"], capsys)[0] == 0
    snapshot = (one_process / "s.pt").read_bytes()
    commands, folders = {}, {}
    for edit, launch in MISFITS:
        folders[edit, launch] = folder = tmp_path_factory.mktemp(edit)
        (folder / "s.pt").write_bytes(snapshot)
        where, changes, _ = LEARNERS_EDITS[edit]
        script = copy_of("a08_ddp_torchrun.py", folder)
        copy_of(where, folder, changes)  # the learner's edit, over the copy
        how = {"torchrun 2": {"nproc": 2}, "torchrun 1": {"nproc": 1}}.get(launch, {})
        commands[edit, launch] = a08_command("--snapshot", "s.pt", script=script, **how) + (
            ["--spawn", "2"] if launch == "spawn 2" else [])
    ports = {key: clean_env() | {"MASTER_PORT": str(free_port())} for key in commands}
    for (edit, launch), result in run_together(commands, folders.get, ports.get).items():
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [MISFIT_LINE.format(LEARNERS_EDITS[edit][2])], \
            (edit, launch, result.stderr)
        assert f'File "{result.cwd}' not in result.stderr  # no traceback of the scripts
        assert (result.returncode, epochs(result.stdout)) == (1, []), (edit, launch)
        assert (result.cwd / "s.pt").read_bytes() == snapshot


@pytest.mark.parametrize("edit", ["adam", "three classes", pytest.param(
    "compiled", marks=pytest.mark.stress)])  # torch.compile's import: a second, in stress
def test_a_snapshot_an_edit_of_a08s_lines_no_longer_fits_is_one_line(edit, one_process, capsys,
                                                                     tmp_path_factory):
    """The same refusal, here (the edit is a08's own line): the optimizer, the model's shape."""
    assert run_main("a08_ddp_torchrun.py", ["--snapshot", "s.pt"], capsys)[0] == 0
    snapshot = (one_process / "s.pt").read_bytes()
    _, changes, reason = LEARNERS_EDITS[edit]
    edited = copy_of("a08_ddp_torchrun.py", tmp_path_factory.mktemp("edited"), changes)
    code, out, err = run_main(str(edited), ["--snapshot", "s.pt"], capsys)
    assert (code, err, epochs(out)) == (1, MISFIT_LINE.format(reason) + "\n", [])
    assert (one_process / "s.pt").read_bytes() == snapshot


def test_a_snapshot_from_before_it_named_its_optimizer_still_resumes(one_process, capsys,
                                                                       tmp_path_factory):
    one = a08_with_epochs(tmp_path_factory.mktemp("one"), 1)
    assert run_main(str(one), ["--snapshot", "s.pt"], capsys)[0] == 0
    older = torch.load("s.pt", weights_only=True)
    del older["optimizer_class"]
    torch.save(older, "s.pt")
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", "s.pt"], capsys)
    assert code == 0, err
    assert epochs(out) == [2, 2, 3, 3]


def test_a_refused_snapshot_leaves_no_process_group_behind(one_process, capsys):
    """A notebook's kernel that met a refusal runs main() again (no group left to hang its
    teardown, or to refuse the next init_process_group)."""
    torch.save(NeuralNetwork(2, 2).state_dict(), "other.pt")
    with pytest.raises(SystemExit):
        a08.main(0, 1, 3, snapshot="other.pt")
    assert not dist.is_initialized()
    a08.main(0, 1, 3)
    assert epochs(capsys.readouterr().out) == [1, 1, 2, 2, 3, 3]


def test_a_resume_goes_on_at_the_snapshots_learning_rate(one_process, tmp_path_factory,
                                                          capsys):
    """A learner edits lr=0.5 and resumes: the optimizer's state brings the snapshot's rate
    back, and the resume says so."""
    one = a08_with_epochs(tmp_path_factory.mktemp("one"), 1)
    edited = copy_of("a08_ddp_torchrun.py", tmp_path_factory.mktemp("edited"),
                     {"lr=0.5)": "lr=0.05)"})
    assert run_main(str(one), ["--snapshot", "s.pt"], capsys)[0] == 0
    code, out, err = run_main(str(edited), ["--snapshot", "s.pt"], capsys)
    assert code == 0, err
    assert "continuing with epoch 2 at the snapshot's lr=0.5\n" in out
    assert epochs(out) == [2, 2, 3, 3]


def test_a_diverged_run_never_writes_a_snapshot(one_process, tmp_path_factory, capsys):
    """A learner's lr=1e30 in a fresh run: the loss prints as nan, no snapshot of non-finite
    weights is written, and one line says why. (Over an existing snapshot the resume brings
    the snapshot's own rate back: test_a_resume_goes_on_at_the_snapshots_learning_rate.)"""
    edited = copy_of("a08_ddp_torchrun.py", tmp_path_factory.mktemp("edited"),
                     {"lr=0.5)": "lr=1e30)"})
    code, out, err = run_main(str(edited), ["--snapshot", "s.pt"], capsys)
    assert code == 1 and "Train/Val Loss: nan" in out
    assert err == ("error: the model's weights are no longer finite numbers (the loss diverged: "
                   "is the learning rate too large?), so nothing was written to s.pt\n")
    assert list(one_process.iterdir()) == []


@posix_signals
def test_sigterm_mid_training_keeps_a_whole_snapshot_and_a_run_resumes(one_process, capsys,
                                                                       tmp_path_factory):
    """What a preempted or killed run meets: SIGTERM. Then a run with num_epochs one more than
    the snapshot holds trains that one epoch."""
    long = a08_with_epochs(tmp_path_factory.mktemp("long"), 100_000)
    launch = start(a08_command("--snapshot", "s.pt", script=long), one_process,
                   clean_env() | {"MASTER_PORT": str(free_port())})
    deadline = time.monotonic() + 60
    while not (one_process / "s.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    launch.send_signal(signal.SIGTERM)
    launch.communicate(timeout=10)
    assert launch.returncode == -signal.SIGTERM  # 143 in a shell
    done = torch.load("s.pt", weights_only=True)["epochs_completed"]
    one_more = a08_with_epochs(tmp_path_factory.mktemp("one_more"), done + 1)
    code, out, err = run_main(str(one_more), ["--snapshot", "s.pt"], capsys)
    assert code == 0, err
    assert f"Resuming from epoch {done} (s.pt): continuing with epoch {done + 1}" in out
    assert set(epochs(out)) == {done + 1}
    assert sorted(p.name for p in one_process.iterdir()) == ["s.pt"]


@posix_signals
@lists_processes
@pytest.mark.stress
def test_torchrun_max_restarts_resumes_after_a_killed_worker(tmp_path):
    """The README's command, a worker killed mid-training three times: torchrun restarts both,
    which resume (each attempt's group apart from the last's: store_for_torchrun_restarts)."""
    rendezvous = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    output = tmp_path / "output.txt"
    with open(output, "w") as sink:  # not a pipe: nobody reads one while the run goes on
        launch = subprocess.Popen([
            sys.executable, "-m", "torch.distributed.run", *rendezvous, "--nproc_per_node=2",
            "--max-restarts=3", str(a08_with_epochs(tmp_path / "copy", 3000)), "--snapshot",
            "s.pt"], cwd=tmp_path, env=clean_env(),
            stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    for kill_at in (200, 600, 1000):
        while not (tmp_path / "s.pt").exists() or torch.load(
                tmp_path / "s.pt", weights_only=True)["epochs_completed"] < kill_at:
            assert launch.poll() is None and time.monotonic() < deadline, \
                output.read_text(encoding="utf-8")
            time.sleep(0.05)
        table = process_table()
        os.kill(max(pid for pid in descendants(launch.pid) if "a08" in table[pid][2]),
                signal.SIGKILL)
    launch.wait(timeout=300)
    out = err = output.read_text(encoding="utf-8")
    assert launch.returncode == 0, err[-3000:]
    assert out.count("Resuming from epoch") == 3 and "connectFullMesh" not in err  # rank 0's
    assert "Global training accuracy over all 2 processes: 1.0" in out
