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


# An install that cannot use this machine's NVIDIA GPU (simulated: a fake nvidia-smi, torch's
# answers about the build and the GPU). torch's own list of its CUDA builds, as torch 2.13's:
CUDA_BUILDS = {"12.6": {"x86_64": {50, 60, 70, 75, 80, 86, 90}, "aarch64": {80, 90}},
               "12.9": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 120}}}
INDEX = "https://download.pytorch.org/whl"


@pytest.fixture
def machine_with(monkeypatch, tmp_path):
    """``machine_with(gpu=None, capability=None, built_for=None)``: nvidia-smi lists ``gpu``
    (none: no driver at all); with ``built_for``, this torch is a CUDA build for those
    architectures and sees the GPU, else a CPU-only build."""
    def simulate(gpu=None, capability=None, built_for=None):
        driver = tmp_path / "driver"
        driver.mkdir()
        if gpu:
            smi = driver / "nvidia-smi"
            smi.write_text(f"#!/bin/sh\necho '{gpu}, {capability[0]}.{capability[1]}'\n")
            smi.chmod(0o755)
        monkeypatch.setenv("PATH", str(driver))  # nothing else: no real driver's nvidia-smi
        monkeypatch.setattr(platform, "machine", lambda: "x86_64")
        monkeypatch.setattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", CUDA_BUILDS, raising=False)
        monkeypatch.setattr(torch, "__version__", "2.13.0+cu126" if built_for else "2.13.0+cpu")
        monkeypatch.setattr(torch.version, "cuda", "12.6" if built_for else None)
        if built_for:
            for name, value in [("is_available", True), ("device_count", 1),
                                ("get_device_capability", capability),
                                ("get_device_name", gpu), ("get_arch_list", built_for)]:
                monkeypatch.setattr(torch.cuda, name, lambda *args, value=value: value)
            if hasattr(torch, "accelerator"):
                monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
                monkeypatch.setattr(torch.accelerator, "current_accelerator",
                                    lambda: torch.device("cuda"))
    return simulate


@pytest.mark.skipif(platform.system() == "Windows", reason="a shell script as nvidia-smi")
@pytest.mark.parametrize("system", ["Linux", "Windows"])
def test_a_cpu_only_build_beside_an_nvidia_gpu_is_named_with_the_command_that_fits(
        system, machine_with, monkeypatch, capsys):
    """PyPI's torch for Windows has no CUDA (pytorch/pytorch#122924): a learner with an RTX
    50xx trained on the CPU without a word. a01 and a07 now say so, with the command that
    installs this release built for a CUDA that has sm_120 (12.9 here: 12.6 has not)."""
    machine_with("NVIDIA GeForce RTX 5090", (12, 0))
    monkeypatch.setattr(platform, "system", lambda: system)
    note = ("Note: this machine has an NVIDIA GPU (NVIDIA GeForce RTX 5090), but torch "
            "2.13.0+cpu is a CPU-only build"
            + (", as PyPI's torch for Windows always is" if system == "Windows" else "")
            + f', so everything runs on the CPU; pip install "torch==2.13.0+cu129" '
              f"--index-url {INDEX}/cu129 installs torch 2.13.0 built for CUDA 12.9, which runs "
              f"on this GPU")
    code, out, err = run_main("a01_tensors.py", [], capsys)
    assert code == 0, err
    assert section(out, "1.3 Installing PyTorch").splitlines()[-1] == note
    code, out, err = run_main("a07_gpu_single.py", ["--epochs", "1"], capsys)
    assert code == 0, err
    assert note in section(out, "9.1 Computations").splitlines()


@pytest.mark.parametrize("gpu, capability, built_for, advice", [
    ("NVIDIA GeForce RTX 5090", (12, 0), ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86",
                                          "sm_90"], "cu129"),  # a new card, cu126's build
    ("NVIDIA GeForce GTX 1080", (6, 1), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100",
                                         "sm_120"], "cu126"),  # an old card a build dropped
])
def test_a_gpu_missing_from_the_build_is_named_before_its_first_cuda_operation(
        gpu, capability, built_for, advice, machine_with, capsys):
    """torch says the GPU is available, warns, then fails with 'no kernel image is available'
    (pytorch/pytorch#150733, #167244). a01 names the cause; a07 stops in one line before its
    first CUDA operation; a08's auto trains on the CPU and says why, its --device cuda is a
    usage error."""
    machine_with(gpu, capability, built_for)
    cc = f"sm_{capability[0]}{capability[1]}"
    line = (f"GPU 0, {gpu}, is {cc}, which torch 2.13.0+cu126 was not built for "
            f"({' '.join(built_for)}): its first CUDA operation would fail with 'no kernel image "
            f'is available\'; pip install "torch==2.13.0+{advice}" --index-url {INDEX}/{advice} '
            f"installs torch 2.13.0 built for CUDA {'12.9' if advice == 'cu129' else '12.6'}, "
            f"which runs on this GPU; or use --device cpu")
    code, out, err = run_main("a01_tensors.py", [], capsys)
    assert code == 0, err
    assert section(out, "1.3 Installing PyTorch").splitlines()[-1] == f"Note: {line}"
    code, out, err = run_main("a07_gpu_single.py", [], capsys)
    assert (code, err.splitlines()) == (1, [f"error: {line}"])
    assert out == ""
    code, out, err = run_main("a08_ddp_torchrun.py", ["--epochs", "1"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"Note: training on the CPU: {line}"
    assert "[CPU0] Training accuracy" in out
    code, _, err = run_main("a08_ddp_torchrun.py", ["--device", "cuda"], capsys)
    assert code == 2
    assert err.splitlines()[-1].endswith(f"argument --device cuda: {line}")


@pytest.mark.parametrize("gpu, capability, built_for", [
    (None, None, None),  # no NVIDIA driver: a CPU-only build is all there is to have
    ("NVIDIA GeForce RTX 3090", (8, 6), ["sm_80", "sm_90"]),  # sm_80's code runs on sm_86
    ("NVIDIA GeForce RTX 5090", (12, 0), ["sm_90", "compute_90"]),  # PTX compiles for it
])
def test_no_advice_where_the_build_fits_or_no_driver_is_there(gpu, capability, built_for,
                                                              machine_with, capsys):
    machine_with(gpu, capability, built_for)
    code, out, err = run_main("a01_tensors.py", [], capsys)
    assert code == 0, err
    assert section(out, "1.3 Installing PyTorch").splitlines()[-1].startswith(
        "torch.backends.mps.is_available()")
