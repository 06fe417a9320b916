"""Shared helpers: run a script as the README tells a user to, from a temporary folder."""

from __future__ import annotations

import faulthandler
import os
import random
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIMS = ROOT / "tests" / "shims"
sys.path.insert(0, str(ROOT))  # the tests import the scripts and common/, as the scripts do
sys.path.append(str(SHIMS))

from answers import hide_accelerators  # noqa: E402

# Windows' rules, where the suite runs on Windows or simulates it (SIMULATE_WINDOWS=1, a step of
# .ci/run: subprocess refuses preexec_fn, symbolic links need developer mode, no `ps`, file
# modes, a folder opened as a file; its children's torch has no libuv, so torchrun cannot start)
WINDOWS = sys.platform == "win32" or os.environ.get("SIMULATE_WINDOWS") == "1"
if WINDOWS and sys.platform != "win32":
    import windows_rules  # noqa: F401

# What a test needs that some systems lack, said where the test is
posix_signals = pytest.mark.skipif(WINDOWS, reason="POSIX signals: Windows has no SIGTERM "
                                   "handler, SIGKILL or process groups to signal")
fake_commands = pytest.mark.skipif(WINDOWS, reason="fakes a command (nvidia-smi, srun) with a "
                                   "shell script: Linux, macOS")
links = pytest.mark.skipif(WINDOWS, reason="a symbolic link needs developer mode on Windows")
lists_processes = pytest.mark.skipif(WINDOWS or shutil.which("ps") is None,
                                     reason="lists a process's children with ps (Linux, macOS)")
torchrun_starts = pytest.mark.skipif(WINDOWS, reason="torchrun cannot start on Windows: its own "
                                     "store needs libuv, which torch's Windows wheels lack "
                                     "(pytorch#139990); --spawn N runs there")

SCRIPTS = [path.name for path in sorted(ROOT.glob("a0*.py"))]
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TEST_SHIMS")
TUTORIAL_LOSS_LINES = [
    "Epoch: 001/003 | Batch 000/002 | Train/Val Loss: 0.75",
    "Epoch: 001/003 | Batch 001/002 | Train/Val Loss: 0.65",
    "Epoch: 002/003 | Batch 000/002 | Train/Val Loss: 0.44",
    "Epoch: 002/003 | Batch 001/002 | Train/Val Loss: 0.13",
    "Epoch: 003/003 | Batch 000/002 | Train/Val Loss: 0.03",
    "Epoch: 003/003 | Batch 001/002 | Train/Val Loss: 0.00",
]


def free_port() -> int:
    """A port free now, below every OS's ephemeral range (Linux's starts at 32768, macOS's and
    Windows' at 49152): an ephemeral port, free when chosen, can be taken by another run's
    outgoing connection before torchrun binds it (EADDRINUSE, seen with runs started together)."""
    while True:
        port = random.SystemRandom().randrange(20000, 32768)
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
        return port


def loss_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "Train/Val Loss" in line]


def clean_env(*shims: str, accelerators: bool = False) -> dict:
    """This environment without launch variables, on a machine without accelerators
    (shims/cpu_only) unless ``accelerators``, with more ``shims`` from tests/shims/."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it: many processes, few cores
    names = ([] if accelerators else ["cpu_only"]) + list(shims)
    if WINDOWS and sys.platform != "win32":
        # every child answers as Windows (platform.system()), its torch as Windows' wheels (no
        # libuv, no parent-death signal), with USE_LIBUV=0 (torchrun's own store ignores it),
        # and Windows' taskkill (shims/bin)
        names = [*dict.fromkeys([*names, "as_windows", "no_libuv", "no_parent_death_signal"])]
        env["USE_LIBUV"] = "0"
        env["PATH"] = os.pathsep.join([str(SHIMS / "bin"), env.get("PATH", "")])  # taskkill
        env["PYTHONIOENCODING"] = "cp1252"  # Windows' stdio into a pipe: the ANSI code page
    if names:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SHIMS), env.get("PYTHONPATH")]))
        env["TEST_SHIMS"] = ",".join(names)
    return env


def a08_command(*args: str, nproc: int | None = None, port: int | None = None,
                script: Path = ROOT / "a08_ddp_torchrun.py") -> list[str]:
    """a08 (or a learner's copy) as one plain process, or under torchrun with ``nproc``."""
    if nproc is None:
        return [sys.executable, str(script), *args]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1", f"--master_port={port or free_port()}", str(script),
            *args]


def a08_with_epochs(folder: Path, num_epochs: int) -> Path:
    """A learner's copy of a08 with ``num_epochs = N`` in place of the text's 3."""
    return copy_of("a08_ddp_torchrun.py", folder, {"    num_epochs = 3\n":
                                                   f"    num_epochs = {num_epochs}\n"})


def run_script(script: str, *args: str, cwd: Path, env: dict | None = None,
               timeout: float = 180) -> subprocess.CompletedProcess:
    """`python <clone>/<script> args...` from ``cwd``, its output captured as text."""
    return run([sys.executable, str(ROOT / script), *args], cwd, env, timeout)


def run(command: list[str], cwd: Path, env: dict | None = None,
        timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def start(command: list[str], cwd: Path, env: dict | None = None,
          session: bool = False) -> subprocess.Popen:
    """``command`` started with its output piped, and Ctrl-C as a terminal gives it: SIGINT at
    its default (pytest-xdist's workers ignore it; POSIX), or a process group of its own that
    CTRL_BREAK_EVENT reaches (Windows, which has no preexec_fn). ``session``: a group of its
    own on POSIX too, as a terminal's foreground job."""
    if WINDOWS:
        options = {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    else:
        options = {"start_new_session": session,
                   "preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)}
    return subprocess.Popen(command, cwd=cwd, env=env or clean_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)


def run_together(commands: dict, cwd_of, env_of=lambda key: clean_env()) -> dict:
    """Every command started at once (a torch import leaves cores idle), then each result,
    with ``cwd``: where it ran."""
    cwds = {key: cwd_of(key) for key in commands}
    started = {key: start(command, cwds[key], env_of(key)) for key, command in commands.items()}
    results = {}
    for key, process in started.items():
        stdout, stderr = process.communicate(timeout=300)
        results[key] = subprocess.CompletedProcess(commands[key], process.returncode, stdout,
                                                   stderr)
        results[key].cwd = cwds[key]
    return results


class CodeRunningPickle:
    """Unpickled, it runs Python code that writes ``marker``: what a malicious checkpoint
    holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def process_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process, from ``ps`` (Linux, macOS;
    marker ``lists_processes``)."""
    table = {}
    ps = subprocess.Popen(["ps", "-A", "-ww", "-o", "pid=", "-o", "ppid=", "-o", "stat=", "-o",
                           "args="], stdout=subprocess.PIPE, text=True)
    for line in ps.communicate()[0].splitlines():
        pid, parent, state, *args = line.split(None, 3)
        table[int(pid)] = (int(parent), state, args[0] if args else "")
    table.pop(ps.pid, None)  # ps itself
    return table


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, alive or not yet reaped."""
    table, found, frontier = process_table(), [], [pid]
    while frontier:
        children = [child for child, (parent, _, _) in table.items() if parent in frontier]
        found += children
        frontier = children
    return found


def copy_of(script: str, folder: Path, edits: dict[str, str] | None = None,
            name: str | None = None) -> Path:
    """A learner's copy of ``script`` in ``folder`` (as ``name``), common/ copied beside it (a
    link needs developer mode on Windows), each ``old`` text in ``edits`` (there: asserted)
    replaced by its ``new``."""
    source = (ROOT / script).read_text(encoding="utf-8")
    for old, new in (edits or {}).items():
        assert old in source, old
        source = source.replace(old, new)
    shutil.copytree(ROOT / "common", folder / "common", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy := folder / (name or script)).write_text(source, encoding="utf-8")
    return copy


def section(out: str, title: str) -> str:
    """The text under the heading that starts with ``title``, up to the next heading."""
    start_at = out.index(f"=== {title}")
    end = out.find("\n=== ", start_at + 1)
    return out[start_at:] if end == -1 else out[start_at:end]


def run_main(script: str, argv: list[str], capsys) -> tuple[int, str, str]:
    """``python script argv`` in this process (its ``__main__`` block): (exit status, stdout,
    stderr). For what a fresh process proves nothing more for: no new interpreter."""
    import torch.distributed as dist

    from common import processes
    old_argv, sys.argv = sys.argv, [script, *argv]
    real_exit, os._exit = os._exit, exit_here  # a08's way out of a process group
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv, os._exit = old_argv, real_exit
        if dist.is_available() and dist.is_initialized():  # left by a08's error, as a08 does
            processes.leave_group()
    out, err = capsys.readouterr()
    return code, out, err


RUNS = {  # what many tests read, run once when first asked: key -> (its command, shims)
    **{name: (lambda name=name: [sys.executable, str(ROOT / name)], ()) for name in SCRIPTS
       if name != "a07_gpu_single.py"},  # its run is --gpu-guides's, below
    "a08 N=2": (lambda: a08_command(nproc=2), ()),
    "a08 --spawn 2": (lambda: a08_command("--spawn", "2", "--snapshot", "final.pt"),
                      ("no_libuv",)),
    "a07 --gpu-guides": (lambda: [sys.executable, str(ROOT / "a07_gpu_single.py"),
                                  "--gpu-guides", "--benchmark", "--sizes", "64,256"],
                         ("no_setuptools",)),
}


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """``runs(key)``: the result of one of ``RUNS``, run when a test first asks for it, in a
    folder of its own (``.cwd``); a08 in torchrun's ways, on a torch without libuv (as
    Windows')."""
    results: dict = {}

    def get(key: str) -> subprocess.CompletedProcess:
        if key not in results:
            command, shims = RUNS[key]
            cwd = tmp_path_factory.mktemp("run")
            env = clean_env(*shims) | {"MASTER_PORT": str(free_port())}  # plain a08's port
            results[key] = run(command(), cwd, env, timeout=600)
            results[key].cwd = cwd
        return results[key]

    return get


def exit_here(code: int) -> None:
    raise SystemExit(code)


@pytest.fixture(autouse=True)
def cpu_only_machine(request, monkeypatch):
    """This process sees no accelerator either (but in tests marked gpu), as its children. (A
    test that touched CUDA with none visible would leave CUDA without devices for the rest of
    the process: test_lesson.py's proofs without a GPU run apart where there are GPUs.)"""
    if not request.node.get_closest_marker("gpu"):
        hide_accelerators(monkeypatch.setattr)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # as shims/cpu_only: none, on purpose
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # a08 in-process: not the text's 12345


@pytest.fixture(autouse=True)
def windows_answers(monkeypatch):
    """SIMULATE_WINDOWS=1: this process too answers platform.system() as Windows (its children:
    shims/as_windows), and a08's USE_LIBUV=0 there stays in the test that set it."""
    if WINDOWS and sys.platform != "win32":
        import platform

        from answers import answering
        monkeypatch.setattr(platform, "system", answering(platform.system, "Windows"))
        monkeypatch.setenv("USE_LIBUV", "0")


# where a worker's hung test leaves every thread's stack, for the report (the workers inherit it)
MADE_STACKS = "COMPANION_TEST_STACKS" not in os.environ
STACKS = Path(os.environ.setdefault("COMPANION_TEST_STACKS", tempfile.mkdtemp(prefix="stacks-")))


def pytest_unconfigure(config):
    if MADE_STACKS:
        shutil.rmtree(STACKS, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_test_hangs(request):
    """A test still running after its limit ends its process, leaving every thread's stack."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(STACKS / f"{worker}.txt", "w") as stacks:
        faulthandler.dump_traceback_later(1200 if request.node.get_closest_marker("stress")
                                          else 240, exit=True, file=stacks)
        yield
        faulthandler.cancel_dump_traceback_later()


def pytest_configure(config):
    """Two test files at a time where pytest-xdist is (".[test]" installs it) and no -n was
    given; without it (a plain `pip install pytest`, or -p no:xdist), one process."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    config.pluginmanager.register(HungTests(), "companion-hung-tests")
    if (config.option.numprocesses is None and not hasattr(config, "workerinput")
            and not config.option.usepdb and not config.option.collectonly):
        config.option.numprocesses, config.option.dist = 2, "loadfile"
        config.option.tx = ["popen"] * 2
        config.option.loadscopereorder = False  # LONGEST_FIRST's order (xdist 3.5 ignores it)


# The files that take longest, given out first (xdist would start those with the most tests
# first): the last to start then ends with the other worker's rest
LONGEST_FIRST = ["test_sections.py", "test_a08.py", "test_gpu_articles.py", "test_snapshots.py",
                 "test_machines.py", "test_signals.py"]


def pytest_collection_modifyitems(items):
    ranks = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: ranks.get(item.path.name, len(ranks)))


def pytest_report_header(config):
    if not config.pluginmanager.hasplugin("xdist"):
        return ('one test at a time (pytest-xdist is not installed, or -p no:xdist): '
                'pip install ".[test]" runs two at once')
    return None


class HungTests:
    """xdist's hook, registered only where xdist is."""

    def pytest_handlecrashitem(self, crashitem, report, sched):
        """A test that hung (its worker ended by no_test_hangs) fails once, with its stack:
        xdist's loadfile would give it to each new worker in turn, stalling the run."""
        for unit in getattr(sched, "workqueue", {}).values():
            if crashitem in unit:
                unit[crashitem] = True
        stacks = STACKS / f"{report.node.gateway.id}.txt"
        if stacks.exists():
            report.longrepr = f"{report.longrepr}\n{stacks.read_text(encoding='utf-8')}"
