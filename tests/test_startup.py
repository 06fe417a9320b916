"""A script's first second and its last: a Ctrl-C or SIGTERM while torch loads, a second
Ctrl-C during a08's teardown, standard streams the shell closed, a learner's torch.py beside
the scripts, the walkthrough stopped midway, what a script adds to the stop line, a signal
while a file is written (common/startup.py, common/ending.py, walkthrough.py)."""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time

from common import ending, startup

import pytest

from conftest import (
    ROOT,
    clean_env,
    copy_of_the_clone,
    needs_proc,
    needs_sigint,
    processes_mentioning,
    read_until,
    run_concurrently,
    shim_env,
    with_shims,
)

INTERRUPTED = "Interrupted (Ctrl-C): stopped before the end; files already written are whole."
STOPPED = "Stopped (SIGTERM, e.g. a preempted job): files already written are whole."


def signal_in_torch_import(signal_name: str = "SIGINT") -> dict:
    """An environment where the script sends itself ``signal_name`` from inside its torch
    import (no cpu_only shim: that one imports torch before the script does; nothing gets as
    far as a device)."""
    return with_shims(clean_env(accelerators=True) | {"SHIM_SIGNAL": signal_name},
                      "signal_in_torch_import")


@needs_sigint
@pytest.mark.parametrize(("signal_name", "line", "status"), [
    ("SIGINT", INTERRUPTED, 130), ("SIGTERM", STOPPED, 143)])
def test_a_signal_while_torch_loads_is_one_line(tmp_path, signal_name, line, status):
    """Before: a 28-line traceback from inside torch (SIGINT), or silence (SIGTERM)."""
    result = subprocess.run([sys.executable, str(ROOT / "a05_training_loop.py")], cwd=tmp_path,
                            env=signal_in_torch_import(signal_name), capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stderr.strip()) == (status, line)
    assert result.stdout == ""


@needs_sigint
def test_a_signal_while_torch_loads_is_said_by_rank_0_only(tmp_path):
    """Under torchrun every worker loads torch at once: one line for all of them."""
    results = [subprocess.run([sys.executable, str(ROOT / "a08_ddp_torchrun.py")], cwd=tmp_path,
                              env=signal_in_torch_import() | {"RANK": str(rank), "WORLD_SIZE": "2",
                                         "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
                              capture_output=True, text=True, timeout=60)
               for rank in (0, 1)]
    assert [(r.returncode, r.stderr.strip()) for r in results] == [(130, INTERRUPTED), (130, "")]


def test_a_program_that_runs_a_script_inside_itself_keeps_its_ctrl_c():
    """A Jupyter kernel's %run runs the script as __main__ inside the kernel, which must stay
    interruptible afterwards (its interrupt button sends SIGINT)."""
    program = ("import runpy, signal, sys\n"
               f"runpy.run_path({str(ROOT / 'a03_mlp.py')!r}, run_name='__main__')\n"
               "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
               " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=clean_env(),
                            capture_output=True, text=True, timeout=120)  # a03 writes nothing
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "True True"


def test_importing_common_elsewhere_leaves_signals_alone():
    """A notebook or pytest that imports common keeps its own Ctrl-C (a Jupyter kernel's
    interrupt button sends SIGINT)."""
    assert not startup.running_a_script()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.stderr is not None


@pytest.mark.stress
@needs_sigint
@needs_proc
def test_a_second_ctrl_c_during_a08s_teardown_adds_nothing(tmp_path):
    """Before: the second Ctrl-C raised inside the teardown, a 47-line traceback."""
    log = tmp_path / "out.txt"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--epochs", "100000"],
            cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True,
            env=shim_env("slow_teardown"),
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while "Epoch:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        assert process.stderr.readline() == "\n"
        assert process.stderr.readline() == INTERRUPTED + "\n"
        process.send_signal(signal.SIGINT)  # now in the teardown, which takes 5 s here
        start = time.monotonic()
        rest = process.stderr.read()
        process.wait(timeout=30)
    assert rest == ""
    assert process.returncode in (130, -signal.SIGINT)
    assert time.monotonic() - start < 3


def test_a_closed_standard_error_changes_nothing_else(tmp_path):
    """``python a03_mlp.py 2>&-``: before, every script exited 1 at once, silently."""
    result = subprocess.run([sys.executable, str(ROOT / "a03_mlp.py")], cwd=tmp_path,
                            env=clean_env(), timeout=120, preexec_fn=lambda: os.close(2),
                            stdout=subprocess.PIPE)
    assert result.returncode == 0
    assert b"Exercise A.3" in result.stdout and b"752" in result.stdout


def test_a_closed_standard_output_changes_nothing_else(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "a02_autograd.py")], cwd=tmp_path,
                            env=clean_env(), timeout=120, preexec_fn=lambda: os.close(1),
                            stderr=subprocess.PIPE)
    assert (result.returncode, result.stderr) == (0, b"")


@pytest.mark.parametrize("name", ["torch.py", "numpy.py", "torch/__init__.py"])
def test_a_file_hiding_a_package_is_named_in_one_line(tmp_path, name):
    """A learner's torch.py beside the scripts: Python would import it instead of torch."""
    clone = copy_of_the_clone(tmp_path, "a01_tensors.py")
    (clone / name).parent.mkdir(exist_ok=True)
    (clone / name).write_text("raise SystemExit('the wrong one')\n")
    result = subprocess.run([sys.executable, str(clone / "a01_tensors.py")], cwd=tmp_path,
                            env=clean_env(accelerators=True), capture_output=True, text=True,
                            timeout=60)
    hiding = clone / name.removesuffix("/__init__.py")
    package = hiding.stem
    assert (result.returncode, result.stderr.splitlines()) == (1, [
        f"error: {hiding} hides the installed {package} package from every script here; "
        f"rename or move it"])


@pytest.mark.stress
@needs_sigint
@needs_proc
def test_ctrl_c_during_the_walkthroughs_a08_is_one_line(tmp_path):
    """Before: torchrun's traceback and each worker's, over a hundred lines."""
    process = subprocess.Popen([sys.executable, "-m", "common.extras.walkthrough"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=clean_env(), start_new_session=True)
    read_until(process, "##### torchrun")
    time.sleep(1)  # its workers load torch
    os.killpg(process.pid, signal.SIGINT)  # the terminal's foreground group: the walkthrough
    start = time.monotonic()
    out, err = process.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert (process.returncode, err) == (130, "\nWalkthrough interrupted during "
                                              "a08_ddp_torchrun.py.\n")
    assert out == ""
    deadline = time.monotonic() + 10  # torchrun may die before its workers can be told
    while processes_mentioning(str(ROOT / "a08_ddp_torchrun.py")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(ROOT / "a08_ddp_torchrun.py")) == []


def test_a_script_adds_to_the_stop_line_with_one_call(monkeypatch):
    """``ending.add_to_stop_line``, as a08 uses it for its hint: each text once, in order (here
    in this process, with the line written to a pipe)."""
    read, write = os.pipe()
    monkeypatch.setattr(ending, "_stderr", write)
    monkeypatch.setattr(ending, "_said", threading.Lock())  # this process has said nothing
    monkeypatch.setattr(ending, "_stop_line_additions", [])
    for text in ("; first", "; second", "; first"):
        ending.add_to_stop_line(text)
    ending.say(signal.SIGTERM)
    os.close(write)
    with os.fdopen(read) as said:
        assert said.read() == f"\n{STOPPED.removesuffix('.')}; first; second.\n"


def test_a_signal_while_a_file_is_written_leaves_nothing_beside_it(tmp_path):
    """SIGTERM the moment the temporary file is complete, before it is renamed
    (shims/signal_at_fsync), to a05 writing its --plot and a08 its --snapshot: the process
    ends at once, and the folder is as it was: no temporary file, no half-written target, no
    snapshot lock."""
    runs = {"a05_training_loop.py": ("--plot", "out.png"),
            "a08_ddp_torchrun.py": ("--snapshot", "out.pt")}
    if importlib.util.find_spec("matplotlib") is None:
        del runs["a05_training_loop.py"]
    for script in runs:
        (tmp_path / script[:3]).mkdir()
    results = run_concurrently(
        {script: [sys.executable, str(ROOT / script), *flags] for script, flags in runs.items()},
        cwd_of=lambda script: tmp_path / script[:3], env_of=lambda script: shim_env(
            "signal_at_fsync"))
    for script, result in results.items():
        assert result.returncode == 143, (script, result.stderr)
        assert result.stderr.strip().startswith(STOPPED.removesuffix(".")), script
        assert sorted(p.name for p in result.cwd.iterdir()) == [], script


@pytest.mark.parametrize("parent, command, gone", [
    (4242, b"/usr/bin/python3\0-m\0torch.distributed.run\0--nproc_per_node=2\0a08.py", False),
    (4242, b"/venv/bin/python\0/venv/bin/torchrun\0a08.py", False),
    (4242, b"/lib/systemd/systemd\0--user", True),  # a subreaper adopted the worker
    (1, None, True),  # macOS (no /proc): adopted by launchd
    (4242, None, False),  # macOS: a living parent, whatever it is
])
def test_a_torchrun_worker_knows_its_agent_died_before_it_started(parent, command, gone,
                                                                 monkeypatch):
    """torchrun names its agent to no worker: the parent's command line says whether it is
    still the agent (Linux), or pid 1 that it was adopted (macOS, simulated: no /proc)."""
    def read_bytes(path):
        if command is None:
            raise FileNotFoundError(path)
        assert str(path) == f"/proc/{parent}/cmdline"
        return command

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setattr(ending.os, "getppid", lambda: parent)
    monkeypatch.setattr(ending.Path, "read_bytes", read_bytes)
    assert ending._torchrun_gone() == gone
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert not ending._torchrun_gone()  # not started by torchrun: nothing to ask
