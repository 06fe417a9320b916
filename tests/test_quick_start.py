"""The README's Quick start works as written on a stock system Python (PEP 668: no bare pip)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

SYSTEM_PYTHON = Path("/usr/bin/python3")  # Debian's and Ubuntu's own, externally managed


def readme() -> str:
    return (ROOT / "README.md").read_text()


def quick_start_lines(shell: str = "bash") -> list[str]:
    """The commands of the Quick start's first ``shell`` block, as a user would paste them."""
    text = readme()
    section = text[text.index("## Quick start"):]
    block = re.search(rf"```{shell}\n(.*?)```", section, flags=re.S)[1]
    return [line for line in block.splitlines() if line.strip()]


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


def shell_commands() -> list[str]:
    """Every command in the README's bash blocks, split at && and ;."""
    blocks = re.findall(r"```bash\n(.*?)```", readme(), flags=re.S)
    lines = [line.split("#")[0] for block in blocks for line in block.splitlines()]
    return [part.strip() for line in lines for part in re.split(r"&&|;", line) if part.strip()]


def test_quick_start_is_two_commands_in_a_virtual_environment():
    lines = quick_start_lines()
    assert len(lines) == 2
    assert lines[0].startswith("python3 -m venv .venv && .venv/bin/pip install . && ")
    assert lines[0].endswith(".venv/bin/python -m common.extras.walkthrough")
    assert lines[1] == '.venv/bin/pip install ".[test]" && .venv/bin/python -m pytest'


def test_the_workflow_runs_the_readme_quick_start_as_written():
    assert workflow_step_lines("Quick start (Linux, macOS)") == quick_start_lines("bash")
    assert workflow_step_lines("Quick start (Windows)") == quick_start_lines("powershell")
    assert len(quick_start_lines("powershell")) == 2


def test_no_bare_pip_install_anywhere_in_the_readme():
    """A stock Python refuses `pip install` outside a virtual environment."""
    installs = [command for command in shell_commands() if " install" in command]
    assert installs, "the README shows no install command"
    for command in installs:
        assert command.startswith((".venv/bin/pip ", ".venv/bin/python -m pip ")), command
    prose = re.sub(r"```.*?```", "", readme(), flags=re.S)
    for inline in re.findall(r"`([^`\n]*pip install[^`\n]*)`", prose):
        assert inline.startswith(".venv/bin/pip") or inline == "pip install", inline


@pytest.mark.stress
@pytest.mark.skipif(not SYSTEM_PYTHON.exists() or shutil.which("git") is None,
                    reason="needs the system's /usr/bin/python3 and git")
def test_quick_start_as_written_in_a_fresh_clone(tmp_path):
    """Line by line, in a fresh clone, with the system's python3 first on PATH and no virtual
    environment active. torch is pinned to the version under test (on this machine the CPU
    build on disk, as .ci/run does) so that pip does not download a CUDA build of several GB."""
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

    outputs = []
    for line in quick_start_lines():
        result = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True,
                                text=True, timeout=1500)
        assert result.returncode == 0, (line, result.stdout[-3000:], result.stderr[-3000:])
        outputs.append(result.stdout)
    assert "Walkthrough complete: all 8 scripts ran." in outputs[0]
    summary = outputs[1].strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
