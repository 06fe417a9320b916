"""Whoever a signal reaches, and however the launcher dies, every process of an a08 run stops
within seconds, leaves no process, lock or folder behind, and the next run resumes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import (
    ROOT,
    alive,
    child_pids,
    clean_env,
    needs_proc,
    needs_torchrun,
    processes_mentioning,
    torchrun_command,
    wait_for_file,
    with_shims,
)

STOPPED_LINE = ("Stopped (SIGTERM, e.g. a preempted job): files already written are whole; "
                "with --snapshot, the same command resumes from the last epoch.")
LONG_RUN = ("--epochs", "100000", "--num-samples", "400")

pytestmark = [pytest.mark.stress, needs_proc]


def start_spawn(folder: Path, snapshot: Path) -> tuple[subprocess.Popen, Path]:
    """a08 --spawn 2 with a temporary directory of its own, to see what it leaves there."""
    tmp = folder / "tmp"
    tmp.mkdir()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--spawn", "2", "--snapshot",
         str(snapshot), *LONG_RUN], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=clean_env() | {"TMPDIR": str(tmp)})
    return process, tmp


def resumes(folder: Path, snapshot: Path) -> None:
    """The next run on the snapshot is not refused (no lock held) and goes on from it."""
    completed = torch.load(snapshot, weights_only=True)["epochs_completed"]
    rerun = subprocess.run([sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--snapshot",
                            str(snapshot), "--epochs", str(completed + 1), "--num-samples", "400"],
                           cwd=folder, capture_output=True, text=True, timeout=120,
                           env=clean_env())
    assert rerun.returncode == 0, rerun.stderr
    assert f"[CPU0] Resuming from epoch {completed} (" in rerun.stdout


@pytest.mark.parametrize("when", ["training", "starting"])
def test_sigterm_to_the_spawn_parent_alone_stops_every_worker(when, tmp_path):
    """`kill PID`, `docker stop`, a process supervisor: the signal reaches only the process
    the user started. Its workers stop too, within seconds, and its folder goes after them."""
    snapshot = tmp_path / "snap.pt"
    process, tmp = start_spawn(tmp_path, snapshot)
    if when == "training":
        wait_for_file(snapshot, [process])
    else:  # the workers have just started: importing torch, or meeting through the store
        deadline = time.monotonic() + 60
        while len(child_pids(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    workers = child_pids(process.pid)
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert process.returncode == 143
    assert stderr.strip().splitlines() == [STOPPED_LINE], stderr
    deadline = time.monotonic() + 5  # multiprocessing's resource tracker ends after its parent
    while [pid for pid in workers if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and not [pid for pid in workers if alive(pid)]
    assert [p.name for p in tmp.iterdir() if p.name.startswith("a08-spawn-")] == []
    if when == "training":
        resumes(tmp_path, snapshot)


def test_sigterm_while_spawn_hands_a_worker_its_start_leaves_no_half_started_worker(tmp_path):
    """SIGTERM to --spawn's parent between starting a worker and handing it what it needs to
    run (shims/slow_child_start makes that a second long; seen once in CI without it): before,
    the parent ended without that worker, which then failed with "EOFError: Ran out of input"
    and its traceback; now the signal waits for the start, and every worker ends with it."""
    marker = tmp_path / "starting"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--spawn", "2", *LONG_RUN],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=with_shims(clean_env(), "slow_child_start") | {"SHIM_MARKER": str(marker)})
    wait_for_file(marker, [process], timeout=60)
    workers = child_pids(process.pid)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr.strip().splitlines()) == (143, [STOPPED_LINE])
    time.sleep(1)  # a worker left behind would be reading its start now, or have failed
    assert not [pid for pid in workers if alive(pid)]


@needs_torchrun
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_workers_stop_when_their_launcher_is_killed(launcher, tmp_path):
    """kill -9 of torchrun or of --spawn's parent (or the out-of-memory killer): the workers,
    adopted by another process, stop within seconds, releasing the snapshot's lock; --spawn's
    folder goes too; the next run resumes."""
    snapshot = tmp_path / "snap.pt"
    if launcher == "torchrun":
        process = subprocess.Popen(torchrun_command(2, "--snapshot", str(snapshot), *LONG_RUN),
                                   cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=clean_env())
        tmp = None
    else:
        process, tmp = start_spawn(tmp_path, snapshot)
    wait_for_file(snapshot, [process])
    os.kill(process.pid, signal.SIGKILL)
    start = time.monotonic()
    process.communicate(timeout=60)  # the pipes close when the last worker has ended
    assert time.monotonic() - start < 15
    deadline = time.monotonic() + 10
    while processes_mentioning(str(snapshot)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(snapshot)) == [], "workers left behind"
    if tmp is not None:
        assert [p.name for p in tmp.iterdir() if p.name.startswith("a08-spawn-")] == []
    resumes(tmp_path, snapshot)


@pytest.mark.parametrize("system", ["Linux", "macOS"])
def test_a_worker_whose_launcher_dies_while_it_loads_torch_stops(system, tmp_path):
    """torchrun killed (or itself interrupted) in the second its workers load torch: they
    were adopted before they could note their launcher, and trained on to the end. On a
    simulated macOS (no prctl: tests/shims/no_prctl), the worker notices its new parent."""
    snapshot = tmp_path / "snap.pt"
    # the launcher itself must not load torch (the shim would fire in it): its worker does,
    # with no cpu_only shim (which loads torch first), on the CPU by --device cpu
    launcher = ("import os, subprocess, sys, time\n"
                "subprocess.Popen(sys.argv[1:], env=os.environ | {'TEST_SHIMS': "
                f"'signal_in_torch_import{',no_prctl' if system == 'macOS' else ''}'}})\n"
                "time.sleep(600)\n")
    env = with_shims(clean_env(accelerators=True), ) | {
        "TEST_SHIMS": "", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999", "SHIM_SIGNAL": "SIGKILL", "SHIM_SIGNAL_TO": "parent"}
    process = subprocess.run(
        [sys.executable, "-c", launcher, sys.executable, str(ROOT / "a08_ddp_torchrun.py"),
         "--device", "cpu", "--snapshot", str(snapshot), *LONG_RUN], cwd=tmp_path, env=env,
        timeout=120)
    assert process.returncode == -signal.SIGKILL  # its worker killed it
    deadline = time.monotonic() + 30
    while processes_mentioning(str(snapshot)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(snapshot)) == [], "a worker trains on"


@needs_torchrun
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_workers_whose_launcher_died_before_they_started_stop(launcher, tmp_path):
    """The launcher killed before its workers' first line (shims/launcher_dies_first): they
    are adopted before they can ask for its death signal, and before: trained on alone (two
    workers alive 12 s later, 3 of 3 tries with --spawn). Now each sees at its start that its
    parent is not its launcher and ends."""
    snapshot = tmp_path / "snap.pt"
    args = ("--snapshot", str(snapshot), *LONG_RUN)
    command = (torchrun_command(2, *args) if launcher == "torchrun" else
               [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--spawn", "2", *args])
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               env=with_shims(clean_env(), "launcher_dies_first"))
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 15
    while processes_mentioning(str(snapshot)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(snapshot)) == [], "workers train on without their launcher"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def spawn_workers(process: subprocess.Popen) -> list[int]:
    """--spawn's workers: its children but multiprocessing's resource tracker."""
    return [pid for pid in child_pids(process.pid)
            if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.mark.parametrize("signum, when", [
    (signal.SIGTERM, "training"), (signal.SIGINT, "training"), (signal.SIGTERM, "starting")])
def test_a_signal_to_one_spawn_worker_is_a_signal_to_the_run(signum, when, tmp_path):
    """Before: SIGTERM to a worker ended the run with 143 and only torch's log, just after it
    started with exit 1, and SIGINT had the other worker report a crash and a torchrun that
    does not run. Now the worker passes the signal to its parent, which says the one line and
    ends every worker, as if it had been sent the signal itself."""
    snapshot = tmp_path / "snap.pt"
    process, _ = start_spawn(tmp_path, snapshot)
    if when == "training":
        wait_for_file(snapshot, [process])
    else:  # its first moments: before it can pass a signal on
        deadline = time.monotonic() + 60
        while len(spawn_workers(process)) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    workers = spawn_workers(process)
    os.kill(workers[-1], signum)
    _, stderr = process.communicate(timeout=60)
    line = STOPPED_LINE if signum == signal.SIGTERM else (
        "Interrupted (Ctrl-C): stopped before the end; files already written are whole.")
    assert (process.returncode, stderr.strip().splitlines()) == (128 + signum, [line])
    assert not [pid for pid in workers if alive(pid)]
    if snapshot.exists():
        resumes(tmp_path, snapshot)


def test_a_signal_while_spawn_writes_its_snapshot_leaves_it_whole_and_alone(tmp_path):
    """SIGTERM to the worker that writes the snapshot, the moment its temporary file is
    complete (shims/signal_at_fsync): one line, and nothing in the folder (before: the
    temporary file, in 3 of 4 tries with Ctrl-C to torchrun's group)."""
    process = subprocess.run(
        [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--spawn", "2", "--snapshot",
         "snap.pt"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=with_shims(clean_env(), "signal_at_fsync"))
    assert (process.returncode, process.stderr.strip()) == (143, STOPPED_LINE)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
