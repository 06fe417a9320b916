"""The default suite on a machine with an accelerator (every Colab GPU, a Mac): its tests assert
what a CPU-only machine prints, so each pins the CPU, and every subprocess it starts sees no
accelerator (conftest.clean_env and tests/shims/cpu_only). Shown here by simulation: torch made
to answer as on a CUDA machine or a Mac (tests/shims/pretend_cuda, pretend_mps)."""

import platform
import re
import subprocess
import sys

from common.extras.devices import mps_digits_note
from common.extras.old_torch import torch_older_than

import pytest
import torch

from conftest import ROOT, clean_env, run_main, run_script, section, with_shims

MACHINES = {"pretend_cuda": "cuda", "pretend_mps": "mps"}
DEVICE_DEPENDENT = ["tests/test_a01_to_a04.py", "tests/test_a05_a06.py", "tests/test_a07_gpu.py",
                    "tests/test_gpu_articles.py", "tests/test_a08_ddp.py",
                    "tests/test_every_script.py"]


def as_on(machine: str) -> dict:
    """The environment of a test run on the simulated machine, before any pinning."""
    return with_shims(clean_env(accelerators=True), machine)


@pytest.mark.parametrize("machine", list(MACHINES))
def test_unpinned_a07_sees_the_simulated_accelerator(machine, tmp_path):
    """The simulation's own check: a07 run as a learner would, without the tests' pinning,
    chooses the simulated device (and fails where it moves a tensor there: this torch computes
    on the CPU). Without this, the run below would prove nothing. On MPS, a07 says right under
    the device line that its digits may differ from the text's (learners' reports of MPS)."""
    result = run_script("a07_gpu_single.py", cwd=tmp_path, env=as_on(machine))
    lines = [*result.stdout.splitlines(), ""]
    after = lines[lines.index(f"Training device: {MACHINES[machine]}") + 1]
    # on MPS, right under the device line: the CPU gives the text's digits
    mps_note = after.startswith("Note: on MPS the losses may differ from the text's in the "
                                "digits, and from run to run; --device cpu reproduces the text's")
    assert mps_note == (machine == "pretend_mps")
    if mps_note:
        assert ("older than 2.9" in after) == torch_older_than(2, 9)


@pytest.mark.stress
@pytest.mark.parametrize("machine", list(MACHINES))
def test_device_dependent_tests_pass_on_a_machine_with_an_accelerator(machine):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "not stress and not gpu", *DEVICE_DEPENDENT],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=as_on(machine))
    assert result.returncode == 0, result.stdout[-5000:]


@pytest.mark.parametrize(("version", "older"), [("2.8.0", True), ("2.4.1+cu121", True),
                                                ("2.9.0", False), ("2.13.0+cpu", False)])
def test_the_mps_note_asks_for_torch_2_9_where_it_is_older(version, older, monkeypatch):
    monkeypatch.setattr(torch, "__version__", version)
    note = mps_digits_note(torch.device("mps"))
    assert ("older than 2.9, which is steadier on MPS" in note) == older
    assert mps_digits_note(torch.device("cpu")) is None


ROSETTA = ("Note: this Python is an Intel (x86_64) build running under Rosetta on an "
           "Apple-silicon Mac, so it gets torch 2.2.2 at most and no MPS; install a native arm64 "
           "Python (python.org's installer, or Homebrew's in /opt/homebrew), then make .venv "
           "again with it\n")


@pytest.mark.parametrize(("system", "machine", "translated", "said"), [
    ("Darwin", "x86_64", "1\n", True),  # an x86_64 Python on Apple silicon
    ("Darwin", "x86_64", "", False),  # an Intel Mac: no such key
    ("Darwin", "arm64", "0\n", False),  # a native Python on Apple silicon
    ("Linux", "x86_64", "1\n", False),
])
def test_a01_says_when_python_runs_under_rosetta(system, machine, translated, said, monkeypatch,
                                                 capsys):
    """Simulated: the system, the machine and macOS's answer to sysctl.proc_translated."""
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(
        command, 0, translated if command[-1] == "sysctl.proc_translated" else "", ""))
    code, out, err = run_main("a01_tensors.py", [], capsys)
    assert code == 0, err
    environment = section(out, "1.3 Installing PyTorch")
    assert (ROSETTA in environment) == said
    assert environment.index("torch.backends.mps.is_available()") < (
        environment.index(ROSETTA) if said else len(environment))


MACHINES_MARKERS = {
    "Intel Mac": {"sys_platform": "darwin", "platform_machine": "x86_64"},
    "Apple silicon": {"sys_platform": "darwin", "platform_machine": "arm64"},
    "Linux": {"sys_platform": "linux", "platform_machine": "x86_64"},
    "Windows": {"sys_platform": "win32", "platform_machine": "AMD64"},
}


def project_requirements(machine: dict) -> dict[str, str]:
    """name -> the specifiers of pyproject's dependencies that apply on ``machine``."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, flags=re.S | re.M)[1]
    found: dict[str, SpecifierSet] = {}
    for line in re.findall(r'^\s*"([^"]+)"', block, flags=re.M):
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(machine):
            found[requirement.name] = found.get(requirement.name, SpecifierSet()) & \
                requirement.specifier
    return {name: str(specifier) for name, specifier in found.items()}


@pytest.mark.parametrize("machine", list(MACHINES_MARKERS))
def test_pip_install_asks_each_machine_for_a_torch_it_has(machine):
    """PyTorch's last wheels for Intel Macs are 2.2.2 (built on NumPy 1.x): there, and only
    there, the project asks for them (before: torch>=2.4, which no Intel Mac can install)."""
    wanted = project_requirements(MACHINES_MARKERS[machine])
    if machine == "Intel Mac":
        assert wanted == {"torch": "==2.2.2", "numpy": "<2,>=1.24"}
    else:
        assert wanted == {"torch": ">=2.4", "numpy": ">=1.24"}
