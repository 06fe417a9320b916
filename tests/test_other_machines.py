"""The default suite on a machine with an accelerator (every Colab GPU, a Mac): its tests assert
what a CPU-only machine prints, so each pins the CPU, and every subprocess it starts sees no
accelerator (conftest.clean_env and tests/shims/cpu_only). Shown here by simulation: torch made
to answer as on a CUDA machine or a Mac (tests/shims/pretend_cuda, pretend_mps)."""

import subprocess
import sys

import pytest

from conftest import ROOT, clean_env, run_script, with_shims

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
    on the CPU). Without this, the run below would prove nothing."""
    result = run_script("a07_gpu_single.py", cwd=tmp_path, env=as_on(machine))
    assert f"Training device: {MACHINES[machine]}" in result.stdout


@pytest.mark.stress
@pytest.mark.parametrize("machine", list(MACHINES))
def test_device_dependent_tests_pass_on_a_machine_with_an_accelerator(machine):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "not stress and not gpu", *DEVICE_DEPENDENT],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=as_on(machine))
    assert result.returncode == 0, result.stdout[-5000:]
