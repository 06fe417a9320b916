"""The README's Quick start works as written on a stock system Python (PEP 668: no bare pip
outside the environment), the GitHub workflow runs the same lines, and (stress) every command of
the README runs as written in the environment the Quick start made, in a fresh clone that stays
clean."""

import os
import re
import shutil
import subprocess
from pathlib import Path

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
    blocks = [(kind, [line for line in block.splitlines() if line.strip()])
              for kind, block in re.findall(r"```(bash|powershell)\n(.*?)```", quick, re.S)]
    blocks = [(kind, lines) for kind, lines in blocks
              if not lines[0].startswith("pip install torch")]
    own = [line for kind, lines in blocks if kind == shell for line in lines]
    return own if shell == "bash" else own + blocks[-1][1]


def workflow_step_lines(name: str) -> list[str]:
    """The lines of the ``run: |`` script of the GitHub workflow's step called ``name``."""
    text = (ROOT / ".github" / "workflows" / "tests.yml").read_text()
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
        expected = 1 if command.startswith("diff ") else 0  # diff: 1 means "they differ"
        if result.returncode != expected:
            failures.append((command, result.returncode, result.stderr[-1500:],
                             result.stdout[-3000:]))  # pytest reports on stdout
    assert failures == []
    # what the commands write where the README runs them: a06's model, a08's snapshot, and
    # pytest's cache; nothing else (no lock files, no temporary files)
    assert clone_status(clone) - {".venv/", "snapshot.pt", "model.pth", ".pytest_cache/"} == set()
