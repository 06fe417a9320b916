"""a07 (sections 9.1, 9.2, Exercise A.4) on the CPU, on any machine; device choice and errors.
Every machine looks CPU-only to these tests (conftest: tests/shims/cpu_only), so a GPU or a Mac
gives the same output here; tests/test_gpu.py checks the GPU run."""

import re

import pytest

from conftest import run_main, section
from test_a05_a06 import TUTORIAL_LOSS_LINES, loss_lines

CPU_LINE = "Training device: cpu (no accelerator found).\n"


@pytest.fixture(scope="module")
def a07(default_run):
    return default_run("a07_gpu_single.py")


def test_a07_section_9_2_same_six_losses_as_a05(a07):
    assert a07.returncode == 0, a07.stderr
    assert loss_lines(section(a07.stdout, "9.2 Single-GPU training")) == TUTORIAL_LOSS_LINES
    text = section(a07.stdout, "9.2 compute_accuracy")
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in text


def test_a07_section_9_1_without_accelerator_explains(a07):
    text = section(a07.stdout, "9.1 Computations on GPU devices")
    assert "On the CPU: tensor([5., 7., 9.])\n" in text
    assert CPU_LINE in text
    assert "tensor([5., 7., 9.], device='cuda:0')" in text
    assert "Expected all tensors" in text


def test_a07_device_cpu_explicit(capsys):
    code, out, err = run_main("a07_gpu_single.py", ["--device", "cpu"], capsys)
    assert code == 0, err
    assert loss_lines(out) == TUTORIAL_LOSS_LINES
    assert CPU_LINE in out


@pytest.mark.parametrize("device, message", [
    ("cuda", "argument --device cuda: this machine has no usable CUDA GPU"),
    ("mps", "argument --device mps: Apple's MPS backend is not available here"),
    ("tpu", "argument --device: invalid choice: 'tpu'"),
])
def test_a07_missing_device_is_a_usage_error(device, message, capsys):
    code, out, err = run_main("a07_gpu_single.py", ["--device", device], capsys)
    assert code == 2
    assert message in err.splitlines()[-1]
    assert out == ""


def test_a07_exercise_a4_benchmark_table(guides):
    """From the run with --gpu-guides --benchmark --sizes 64,256 (conftest.guides)."""
    text = section(guides, "9.1 Exercise A.4")
    rows = re.findall(r"^ +(\d+) \| +(\d+\.\d{3})(?: \|.*)?$", text, flags=re.M)
    assert [size for size, _ in rows] == ["64", "256"]
    assert all(float(ms) > 0 for _, ms in rows)
    assert "  size |   CPU (ms)\n" in text  # tests/test_gpu.py checks the GPU column
    assert "No accelerator on this machine, so there is no second column" in text
    assert re.search(r"^The solution's own case, 100x200 @ 200x300: CPU \d+\.\d us$", text,
                     flags=re.M)
