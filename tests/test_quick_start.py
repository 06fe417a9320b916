"""The README's Quick start works as written on a stock system Python (PEP 668: no bare pip
outside the environment), the GitHub workflow runs the same lines, and (stress) every command of
the README runs as written in the environment the Quick start made, in a fresh clone that stays
clean."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, clean_env
from test_readme import NOT_RUN_HERE, commands_run_here, readme

SYSTEM_PYTHON = Path("/usr/bin/python3")  # Debian's and Ubuntu's own, externally managed
CPU_BUILD = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def quick_start_lines(shell: str = "bash") -> list[str]:
    """The Quick start's commands in ``shell`` as a user pastes them, in order, without the
    lines for one system's torch (bash, or PowerShell then the lines for every system)."""
    text = readme()
    quick = text[text.index("## Quick start"):text.index("## What success looks like")]
    blocks = [(kind, [line for line in block.splitlines()
                      if line.strip() and not line.startswith("#")])
              for kind, block in re.findall(r"```(bash|powershell)\n(.*?)```", quick, re.S)]
    blocks = [(kind, lines) for kind, lines in blocks  # not one system's torch, nor uv's path
              if not lines[0].startswith(("pip install torch", "uv "))]
    own = [line for kind, lines in blocks if kind == shell for line in lines]
    return own if shell == "bash" else own + blocks[-1][1]


def workflow_step_lines(name: str) -> list[str]:
    """The lines of the ``run: |`` script of the GitHub workflow's step called ``name``."""
    text = (ROOT / ".github" / "workflows" / "tests.yml").read_text(encoding="utf-8")
    step = text[text.index(f"- name: {name}\n"):]
    script = step[step.index("run: |\n") + len("run: |\n"):]
    indent = len(script) - len(script.lstrip(" "))
    lines = []
    for line in script.splitlines():
        if not line.startswith(" " * indent):
            break
        lines.append(line.strip())
    return lines


def test_the_workflow_runs_the_readme_quick_start_as_written():
    lines = quick_start_lines()
    assert workflow_step_lines("Quick start (macOS)") == lines
    # Linux: the README's CPU-only route, right before `pip install .` as the README says
    assert workflow_step_lines("Quick start (Linux, CPU build of torch)") == [
        *lines[:2], CPU_BUILD, *lines[2:]]
    assert workflow_step_lines("Quick start (Windows)") == quick_start_lines("powershell")
    assert CPU_BUILD in NOT_RUN_HERE
    assert workflow_step_lines("uv path") == uv_lines()


def test_no_pip_install_outside_the_environment():
    """A stock Python refuses `pip install` outside a virtual environment: every install in
    the README runs in the activated environment, none forces its way past that."""
    text = readme()
    assert text.index("source .venv/bin/activate") < text.index("pip install")
    for command in re.findall(r"[^`\n]*pip install[^`\n]*", text):
        assert "--break-system-packages" not in command and "--user" not in command, command
        assert "sudo pip" not in command, command


def readme_command_in_the_clone(command: str, clone: Path, env: dict,
                                timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` typed into a terminal at the clone, after the Quick start's activation."""
    return subprocess.run(["bash", "-c", f"source .venv/bin/activate && {command}"], cwd=clone,
                          env=env, capture_output=True, text=True, timeout=timeout)


def clone_status(clone: Path) -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=normal"],
                         cwd=clone, capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines()}


@pytest.mark.stress
@pytest.mark.skipif(not SYSTEM_PYTHON.exists() or shutil.which("git") is None,
                    reason="needs the system's /usr/bin/python3 and git")
def test_quick_start_then_every_readme_command_in_a_fresh_clone(tmp_path):
    """The Quick start block as one terminal session, in a fresh clone, with the system's
    python3 first on PATH and no virtual environment active; the clone then holds nothing new
    but .venv/. Then every README command that can run here, as written, in that environment.
    torch is pinned to the version under test (on this machine the CPU build on disk, as
    .ci/run does) so that pip does not download a CUDA build of several GB."""
    import torch

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    env = {key: value for key, value in clean_env().items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"])
    env["PIP_CONSTRAINT"] = str(constraints)

    session = subprocess.run(["bash", "-e", "-c", "\n".join(quick_start_lines())], cwd=clone,
                             env=env, capture_output=True, text=True, timeout=1500)
    assert session.returncode == 0, (session.stdout[-3000:], session.stderr[-3000:])
    assert "Walkthrough complete: all 8 scripts ran." in session.stdout
    assert clone_status(clone) == {".venv/"}, "the Quick start left files in the clone"

    failures = []
    for command in commands_run_here():
        if command.startswith(("python3 -m venv", "source ", "pip install .",
                               "python -m common.walkthrough")):
            continue  # the Quick start, above
        result = readme_command_in_the_clone(command, clone, env)
        # git diff --no-index: 1 means "they differ"
        expected = 1 if command.startswith("git diff --no-index ") else 0
        if result.returncode != expected:
            failures.append((command, result.returncode, result.stderr[-1500:],
                             result.stdout[-3000:]))  # pytest reports on stdout
    assert failures == []
    # what the commands write where the README runs them: a06's model, a08's snapshot, and
    # pytest's cache; nothing else (no lock files, no temporary files)
    assert clone_status(clone) - {".venv/", "snapshot.pt", "model.pth", ".pytest_cache/"} == set()


def uv_lines() -> list[str]:
    """The README's uv path, its commands in order."""
    text = readme()
    return re.search(r"```bash\n(uv venv.*?)```", text, re.S)[1].splitlines()


def torch_wheel_on_disk() -> Path | None:
    """This machine's own torch wheel, where pip's find-links has it (PyPI's torch for Linux is
    the CUDA build, several GB; PyTorch's indexes, which uv's --torch-backend asks, cannot be
    reached here)."""
    import torch
    # pip's own view of its settings, PIP_FIND_LINKS (":env:.find-links=...") included
    config = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                            text=True).stdout
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"  # this Python's, for uv venv
    for folder in re.findall(r"find-links='?([^'\s]+)", config):
        found = sorted(Path(folder).glob(f"torch-{torch.__version__}-{tag}-*.whl"))
        if found:
            return found[0]
    return None


UV = shutil.which("uv")


@pytest.mark.stress
@pytest.mark.skipif(UV is None, reason="needs uv (pip install uv; .ci/run installs it)")
def test_the_uv_path_keeps_the_torch_it_installed(tmp_path):
    """The README's uv lines in a fresh clone (this Python for the venv; this machine's torch
    wheel for `--torch-backend=auto`, which needs PyTorch's index): `uv run` runs the
    walkthrough on that very torch, and the clone gains only .venv/ and uv.lock."""
    import torch
    wheel = torch_wheel_on_disk()
    if wheel is None:
        pytest.skip("no torch wheel on disk for this torch: PyPI's Linux build is several GB")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    here = {"uv venv --seed --python 3.12": f"uv venv --seed --python {sys.executable}",
            "uv pip install --no-config torch --torch-backend=auto":
                f"uv pip install --no-config {wheel}"}
    assert set(here) < set(uv_lines())
    env = {k: v for k, v in clean_env().items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    session = subprocess.run(["bash", "-e", "-c", "\n".join(here.get(line, line) for line in
                                                           uv_lines())],
                             cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert session.returncode == 0, (session.stdout[-3000:], session.stderr[-3000:])
    assert "Walkthrough complete: all 8 scripts ran." in session.stdout
    kept = subprocess.run([UV, "run", "python", "-c", "import torch; print(torch.__version__)"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert kept.stdout.strip() == torch.__version__, kept.stderr
    assert clone_status(clone) == {".venv/", "uv.lock"}  # both in .gitignore


@pytest.mark.stress
@pytest.mark.skipif(UV is None, reason="needs uv (pip install uv; .ci/run installs it)")
def test_uvs_lock_has_numpy_wheels_for_every_python_it_allows(tmp_path):
    """uv locks once for every machine: numpy must come as wheels for Python 3.10 to 3.14
    (1.26.4, the Intel Macs' pin, has none for 3.13), and the lock leaves torch out."""
    import tomllib
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "README.md", tmp_path)
    result = subprocess.run([UV, "lock"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lock = tomllib.loads((tmp_path / "uv.lock").read_text(encoding="utf-8"))
    numpy = [p for p in lock["package"] if p["name"] == "numpy"]
    intel = "platform_machine == 'x86_64' and sys_platform == 'darwin'"
    elsewhere = [p for p in numpy if not all(intel in m for m in p["resolution-markers"])]
    tags = {tag for p in elsewhere for wheel in p["wheels"]
            for tag in re.findall(r"-(cp3\d+)-", wheel["url"])}
    assert {"cp310", "cp311", "cp312", "cp313", "cp314"} <= tags
    assert all(int(p["version"].split(".")[0]) >= 2 for p in elsewhere)
    assert [p for p in lock["package"] if p["name"] == "torch"] == []


class Plugins:
    def __init__(self, xdist: bool) -> None:
        self.xdist, self.registered = xdist, []

    def hasplugin(self, name: str) -> bool:
        return self.xdist and name == "xdist"

    def register(self, plugin, name: str) -> None:
        self.registered.append(name)


@pytest.mark.parametrize("xdist", [True, False])
def test_the_readmes_test_command_runs_two_files_at_once_only_where_xdist_is(xdist):
    """`python -m pytest` with ".[test]": two workers, a file each; with pytest alone (or
    -p no:xdist): one process, its header saying how to get two, and no xdist hook."""
    import conftest
    option = SimpleNamespace(numprocesses=None, dist="no", tx=[], usepdb=False,
                             collectonly=False)
    config = SimpleNamespace(pluginmanager=Plugins(xdist), option=option)
    conftest.pytest_configure(config)
    header = conftest.pytest_report_header(config)
    if xdist:
        assert (option.numprocesses, option.dist, option.tx) == (2, "loadfile", ["popen"] * 2)
        assert config.pluginmanager.registered == ["companion-hung-tests"] and header is None
    else:
        assert (option.numprocesses, option.dist, config.pluginmanager.registered) == \
            (None, "no", [])
        assert 'pip install ".[test]"' in header
