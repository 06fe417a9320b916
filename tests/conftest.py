"""Shared helpers: run a script the way the README tells a user to, from a temporary folder."""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # lets tests import the scripts and common/, as the scripts do

from common.extras import DDP_ENDING, run, walkthrough  # noqa: E402
from common.extras.launcher import torchrun_command as launcher_torchrun_command  # noqa: E402

ON_WINDOWS = platform.system() == "Windows"
TORCH_LOG = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d")  # a line of torch's own (glog) log
needs_torchrun = pytest.mark.skipif(
    ON_WINDOWS, reason="torch's Windows wheels lack libuv, so torchrun cannot start there "
                       "(a08 --spawn is tested instead)")
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="finds the worker processes through /proc (Linux)")
needs_sigint = pytest.mark.skipif(ON_WINDOWS, reason="Windows cannot send SIGINT to a child")


def run_script(script: str, *args: str, cwd: Path, timeout: float = 120,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """`python <repo>/<script> args...` run in ``cwd``; output captured as text."""
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def copy_of_the_clone(folder: Path, *scripts: str) -> Path:
    """``common/`` and ``scripts`` copied into ``folder/clone``, for a test that edits them
    as a learner would, or puts a file of the learner's beside them."""
    clone = folder / "clone"
    shutil.copytree(ROOT / "common", clone / "common",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for script in scripts:
        shutil.copy(ROOT / script, clone)
    return clone


def clean_env(accelerators: bool = False) -> dict:
    """The caller's environment without torchrun's variables and test shims (tests may run
    under anything, even the tests: test_quick_start runs them in a fresh clone), on a machine
    without accelerators (tests/shims/cpu_only) unless ``accelerators``: the default suite
    asserts what a CPU-only machine prints, on every machine."""
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TEST_SHIMS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env if accelerators else with_shims(env, "cpu_only")


def rank_env(rank: int, port: int, world_size: int = 2, env: dict | None = None) -> dict:
    """The variables torchrun would set for one of ``world_size`` processes on this machine,
    added to ``env`` (default: clean_env())."""
    return (clean_env() if env is None else env) | {
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port)}


def as_torchrun_process(monkeypatch, rank: int, port: int, world_size: int = 2) -> None:
    """In this process, for one test: the variables rank_env() names (run_main then runs a08
    as that process of ``world_size``)."""
    for name, value in rank_env(rank, port, world_size, env={}).items():
        monkeypatch.setenv(name, value)


def machine_command(node: int, nproc: int, port: int, *args: str,
                    max_restarts: int = 0) -> list[str]:
    """torchrun on one of two simulated machines (--nnodes=2) meeting at 127.0.0.1:port."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}",
            f"--nproc_per_node={nproc}", f"--max-restarts={max_restarts}",
            "--master_addr=127.0.0.1", f"--master_port={port}",
            str(ROOT / "a08_ddp_torchrun.py"), *args]


def start_process(command: list[str], cwd: Path, env: dict | None = None,
                  **popen: object) -> subprocess.Popen:
    """``command`` running in ``cwd``, its output piped as text (unless ``popen`` says
    otherwise), with SIGINT as in a terminal (a test run started in the background inherits it
    ignored)."""
    return subprocess.Popen(command, cwd=cwd, text=True, env=env or clean_env(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen})


def read_until(process: subprocess.Popen, starts: str) -> str:
    """Read the process's output up to and including the first line containing ``starts``."""
    for line in process.stdout:
        if starts in line:
            return line
    raise AssertionError(f"no line with {starts!r}; exit status {process.wait()}")


def wait_for_file(path: Path, launches: list[subprocess.Popen], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline and \
            all(launch.poll() is None for launch in launches):
        time.sleep(0.05)
    assert path.exists(), f"no {path.name} within {timeout} s"


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped (Linux: /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def child_pids(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def processes_mentioning(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


class CodeRunningPickle:
    """Unpickled, it runs ``touch marker``: what a malicious checkpoint holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (held together while choosing)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]


def repo_litter() -> set[str]:
    """Checkpoint and image files lying in the repository, tracked, untracked or ignored;
    virtual environments (whose packages ship such files) aside."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return {line[3:] for line in out.splitlines()
            if line[3:].endswith((".pth", ".pt", ".png"))
            and not line[3:].startswith((".venv/", ".venvs/", "venv/"))}


def section(out: str, title: str) -> str:
    """The text under the heading that starts with ``title``, up to the next heading."""
    start = out.index(f"=== {title}")
    end = out.find("\n=== ", start + 1)
    return out[start:] if end == -1 else out[start:end]


LITTER_AT_START = repo_litter()


def pytest_configure(config) -> None:
    global REAL_STDERR
    REAL_STDERR = os.dup(2)  # taken while pytest is not capturing: the terminal, or CI's log


@pytest.fixture(autouse=True)
def no_test_hangs(request):
    """A test still running after its limit ends the whole run at once, with the stack of every
    thread on the real stderr: a hang costs minutes and says where, instead of running until CI
    gives up."""
    limit = 1800 if request.node.get_closest_marker("stress") else 300
    faulthandler.dump_traceback_later(limit, exit=True, file=REAL_STDERR)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run")


DEFAULT_RUN_SCRIPTS = tuple(script for script, *_ in walkthrough.STEPS)  # the one list of scripts


def run_concurrently(commands: dict, cwd_of, timeout: float = 300,
                     env_of=lambda key: clean_env()) -> dict:
    """Start every command at once (this machine has idle cores while one script imports
    torch), then collect each one's output; each result's ``cwd`` is where it ran."""
    cwds = {key: cwd_of(key) for key in commands}
    started = {key: subprocess.Popen(command, cwd=cwds[key], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env_of(key))
               for key, command in commands.items()}
    results = {}
    for key, process in started.items():
        stdout, stderr = process.communicate(timeout=timeout)
        results[key] = subprocess.CompletedProcess(commands[key], process.returncode,
                                                   stdout, stderr)
        results[key].cwd = cwds[key]
    return results


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """``default_run(script)``: the script's output with no flags, each in its own temporary
    folder; all scripts are run once per test session, side by side."""
    cache: dict[str, subprocess.CompletedProcess] = {}

    def get(script: str) -> subprocess.CompletedProcess:
        if not cache:
            cache.update(run_concurrently(
                {name: [sys.executable, str(ROOT / name)] for name in DEFAULT_RUN_SCRIPTS},
                cwd_of=lambda name: tmp_path_factory.mktemp(name[:3])))
        return cache[script]

    return get


@pytest.fixture(scope="session")
def guides(tmp_path_factory) -> str:
    """a07 with the articles and the benchmark (sizes 64 and 256), on a torch whose adaptive
    pooling refuses what MPS refuses: its output, for test_gpu_articles.py and a07's table."""
    result = run_script("a07_gpu_single.py", "--gpu-guides", "--device", "cpu", "--benchmark",
                        "--sizes", "64,256", cwd=tmp_path_factory.mktemp("guides"),
                        env=shim_env("mps_pooling"))
    assert result.returncode == 0, result.stderr
    return result.stdout


def torchrun_command(nproc: int, *args: str, port: int | None = None,
                     launcher_args: tuple[str, ...] = ()) -> list[str]:
    """`torchrun --nproc_per_node=N a08_ddp_torchrun.py args...` on a free port."""
    return launcher_torchrun_command(
        nproc, str(ROOT / "a08_ddp_torchrun.py"), *args,
        launcher_args=launcher_args or ("--master_addr=127.0.0.1",
                                        f"--master_port={port or free_port()}"))


def torchrun(nproc: int, *args: str, cwd: Path, timeout: float = 180,
             launcher_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun_command(nproc, *args, launcher_args=launcher_args),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env())


SHIMS = ROOT / "tests" / "shims"


def with_shims(env: dict, *names: str) -> dict:
    """``env`` with test shims from tests/shims/ added after those it names already (see
    tests/shims/sitecustomize.py and each shim's docstring)."""
    env = dict(env)
    paths = env.get("PYTHONPATH", "").split(os.pathsep)
    if str(SHIMS) not in paths:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SHIMS), *paths]))
    env["TEST_SHIMS"] = ",".join(filter(None, [env.get("TEST_SHIMS"), *names]))
    return env


def shim_env(*names: str) -> dict:
    """clean_env() with more shims: ``no_libuv`` (torch's Windows wheels), ``spawn_start``
    (macOS and Windows start methods), ``mps_pooling`` (MPS's adaptive pooling),
    ``no_grad_averaging`` (a DDP that trains each process's copy on its own)."""
    return with_shims(clean_env(), *names)


def _load_cpu_only():
    sys.path.append(str(SHIMS))  # for its own import of answers.py
    spec = importlib.util.spec_from_file_location("cpu_only_rule", SHIMS / "cpu_only.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hide_accelerators = _load_cpu_only().hide_accelerators


@pytest.fixture(autouse=True)
def cpu_only_machine(request, monkeypatch):
    """In this process too, each test but the gpu-marked ones sees a machine without
    accelerators, as its subprocesses do."""
    if not request.node.get_closest_marker("gpu"):
        hide_accelerators(monkeypatch.setattr)


def run_main(script: str, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a script's main() in this process with ``argv``: (exit status, stdout, stderr).

    For checks that end before any real work (--help, usage errors, refused files): the same
    code path as the command line without paying for a new interpreter and a torch import.
    """
    module = importlib.import_module(script.removesuffix(".py"))
    old_argv = sys.argv
    sys.argv = [script, *argv]
    try:
        # as `if __name__ == "__main__": extras.run(main, ...)` does
        run(module.main, *([DDP_ENDING] if script.startswith("a08") else []))
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv = old_argv
    out, err = capsys.readouterr()
    return code, out, err
