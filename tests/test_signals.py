"""Ctrl-C and SIGTERM, to any process or launcher, while training or waiting for a peer:
every process ends within seconds, without a traceback (test_snapshots: files stay whole)."""

import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from common import runner
from conftest import (
    ROOT,
    WINDOWS,
    a08_command,
    a08_with_epochs,
    clean_env,
    descendants,
    free_port,
    lists_processes,
    posix_signals,
    process_table,
    start,
)

LONG = 100_000  # epochs: training that outlasts the test


def started(command: list[str], cwd, env=None, line: str = "Epoch:",
            session: bool = False) -> subprocess.Popen:
    """``command``, once a line of its output holds ``line``."""
    process = start(command, cwd, env, session)
    for output in process.stdout:
        if line in output:
            return process
    raise AssertionError(f"no {line!r}: {process.communicate()[1][-2000:]}")


def ended_within(process: subprocess.Popen, seconds: float, family: list[int],
                 importing: bool = False) -> str:
    """Its stderr, once it and every process it started have ended within ``seconds``; no
    traceback of ours, unless a process may still be ``importing`` torch (Python's own Ctrl-C
    then: run() has not yet made it end at once)."""
    _, err = process.communicate(timeout=seconds)
    deadline = time.monotonic() + seconds
    while alive := [pid for pid in family if running(pid)]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.1)
    assert importing or f'File "{ROOT}' not in err, err[-3000:]  # (torchrun has its own)
    return err


def running(pid: int) -> bool:
    return pid in (table := process_table()) and not table[pid][1].startswith("Z")


@posix_signals
def test_a_process_waiting_for_its_peer_ends_at_once_on_ctrl_c(tmp_path):
    """Python's own Ctrl-C would wait while torch waits in C++ for the peer (80 s and more);
    SIGTERM's default ends a process at once anyway (test_snapshots sends it mid-training)."""
    env = clean_env() | {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": str(free_port())}
    process = started(a08_command(), tmp_path, env, line="Number of GPUs available")
    time.sleep(1)  # inside init_process_group, waiting for process 1
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    ended_within(process, 3, [])
    assert process.returncode == -signal.SIGINT  # 130 in a shell
    assert time.monotonic() - sent < 2


@posix_signals
@lists_processes
@pytest.mark.stress
def test_sigterm_to_torchrun_ends_every_process(tmp_path):
    """torchrun passes SIGTERM (a preemption, a kill) on to its workers, which end at once."""
    process = started(a08_command(nproc=2, script=a08_with_epochs(tmp_path, LONG)), tmp_path)
    family = descendants(process.pid)
    assert len(family) >= 2
    process.send_signal(signal.SIGTERM)
    ended_within(process, 15, family)
    assert process.returncode != 0


@posix_signals
@lists_processes
@pytest.mark.stress
def test_sigterm_to_one_spawn_worker_ends_the_run(tmp_path):
    """The parent ends the other worker (torch's spawn); each says in one line why it ended."""
    process = started(a08_command("--spawn", "2", script=a08_with_epochs(tmp_path, LONG)),
                      tmp_path)
    family = descendants(process.pid)
    workers = [pid for pid in family if "spawn_main" in process_table()[pid][2]]
    assert len(workers) == 2
    os.kill(max(workers), signal.SIGTERM)
    err = ended_within(process, 15, family)
    assert process.returncode in (1, 128 + signal.SIGTERM)  # whichever it saw end first
    assert err and all(line.startswith("error: process ") for line in err.splitlines()), err


@posix_signals
@lists_processes
@pytest.mark.stress
@pytest.mark.parametrize("target", ["parent", "parent, macOS", "group"])
def test_sigterm_or_ctrl_c_to_spawns_parent_ends_every_worker(target, tmp_path):
    """SIGTERM to the parent alone (on Linux its workers learn of it from the kernel too; as on
    macOS, shims/no_parent_death_signal, only from the parent), or Ctrl-C at the terminal (to
    the whole foreground group)."""
    env = clean_env("no_parent_death_signal") if target == "parent, macOS" else None
    process = started(a08_command("--spawn", "2", script=a08_with_epochs(tmp_path, LONG)),
                      tmp_path, env, session=True)
    family = descendants(process.pid)
    if target.startswith("parent"):
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGINT)
    ended_within(process, 15, family)


@posix_signals
@lists_processes
@pytest.mark.stress
def test_ctrl_c_during_the_walkthrough_ends_it_and_every_process(tmp_path):
    process = started([sys.executable, "-m", "common.walkthrough"], ROOT,
                      clean_env() | {"PYTHONUNBUFFERED": "1"}, line="##### torchrun",
                      session=True)
    time.sleep(3)  # a08's processes start
    family = descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    err = ended_within(process, 20, family, importing=True)
    assert process.returncode == 130
    assert "Walkthrough interrupted during a08_ddp_torchrun.py." in err


@pytest.mark.skipif(not WINDOWS or sys.platform == "win32" or shutil.which("ps") is None,
                    reason="the walkthrough's Windows path, simulated: SIMULATE_WINDOWS=1 on "
                           "Linux or macOS (.ci/run), where SIGTERM and ps stand in for Ctrl-C")
def test_the_walkthrough_on_windows_spawns_a08_and_sigterm_ends_every_process(tmp_path):
    """Every process answers as Windows (shims/as_windows), whose torch cannot start torchrun:
    the walkthrough runs a08 with --spawn 2 (a clone of a08 alone, for its step alone), and
    SIGTERM, which it takes as Ctrl-C, ends it and every worker."""
    a08_with_epochs(tmp_path, LONG)
    process = started([sys.executable, "-m", "common.walkthrough"], tmp_path,
                      clean_env() | {"PYTHONUNBUFFERED": "1"}, session=True)
    family = descendants(process.pid)
    assert len([pid for pid in family if "spawn_main" in process_table()[pid][2]]) == 2
    process.send_signal(signal.SIGTERM)
    err = ended_within(process, 15, family)
    assert process.returncode == 130
    assert "Walkthrough interrupted during a08_ddp_torchrun.py." in err


def test_a_notebook_keeps_its_interrupt_button(monkeypatch):
    """Only where a script was started (its path on the interpreter's command line, whatever
    its name) does run() hand Ctrl-C to the kernel: a notebook's %run, or pytest, keeps
    Python's KeyboardInterrupt."""
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "ipykernel_launcher", "-f",
                                           "kernel.json"])
    monkeypatch.setattr(sys, "argv", [str(ROOT / "a05_training_loop.py")])  # as %run sets it
    runner.run(lambda: None)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(sys, "argv", ["-c"])  # python -c "...", as pytest-xdist's workers
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-c", "import a05_training_loop"])
    runner.run(lambda: None)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(sys, "argv", ["my_a05.py"])
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-u", "my_a05.py"])
    try:
        runner.run(lambda: None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class ReaderGone(io.RawIOBase):
    """stdout into a pipe whose reader stopped (`| head`, `| more`): every write fails with
    ``error`` while it is set."""

    def __init__(self, error: OSError | None) -> None:
        self.error, self.fd = error, os.open(os.devnull, os.O_WRONLY)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.error:
            raise self.error
        return len(data)

    def fileno(self) -> int:
        return self.fd


def an_error_of_its_own() -> None:
    raise OSError(errno.EINVAL, "Invalid argument")


@pytest.mark.parametrize("error", [BrokenPipeError(errno.EPIPE, "Broken pipe"),
                                   OSError(errno.EINVAL, "Invalid argument")],
                         ids=["posix", "windows (python/cpython#79935)"])
def test_output_into_a_reader_that_stopped_ends_without_a_traceback(error, monkeypatch):
    """`python a05_training_loop.py | head`: exit 1, quietly. The script's own EINVAL, its
    output fine, keeps its traceback."""
    pipe = ReaderGone(error)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(pipe)))
    with pytest.raises(SystemExit) as ended:
        runner.run(print, "Epoch: 001/003 | Batch 000/002 | Train/Val Loss: 0.75")
    assert ended.value.code == 1
    pipe.error = None
    with pytest.raises(OSError, match="Invalid argument"):
        runner.run(an_error_of_its_own)
    os.close(pipe.fd)
