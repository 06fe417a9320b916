"""Sections 9.1 to 9.3 on CUDA GPUs: run by `bash .ci/gpu-check` on a machine with one; every
test here skips, with its reason, where there is no CUDA GPU."""

import re

import pytest
import torch

from conftest import (
    TUTORIAL_LOSS_LINES,
    a08_command,
    a08_with_epochs,
    clean_env,
    loss_lines,
    run,
    run_script,
    section,
    torchrun_starts,
)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPUS = torch.cuda.device_count()
REAL_DEVICES = clean_env(accelerators=True)  # the other tests' subprocesses see no GPU


def test_a07_sections_9_1_and_9_2_and_exercise_a4_on_cuda(tmp_path):
    result = run_script("a07_gpu_single.py", "--benchmark", "--sizes", "64,256,1024,4096",
                        cwd=tmp_path, env=REAL_DEVICES)
    assert result.returncode == 0, result.stderr
    text = section(result.stdout, "9.1 Computations on GPU devices")
    assert "On cuda: tensor([5., 7., 9.], device='cuda:0')\n" in text
    assert "Adding a CPU tensor to it fails: Expected all tensors to be on the same device" in text
    assert loss_lines(section(result.stdout, "9.2 Single-GPU training")) == TUTORIAL_LOSS_LINES
    assert "Training accuracy: 1.0\nTest accuracy: 1.0\n" in result.stdout
    a4 = section(result.stdout, "9.2 Exercise A.4")
    assert re.search(r"^The solution's own case, 100x200 @ 200x300: CPU [\d.]+ us, CUDA [\d.]+ "
                     r"us$", a4, flags=re.M) and "|  CUDA (ms) | speed-up" in a4
    assert re.search(r"^The CUDA (wins from size \d+ on|did not win at any size measured)\.$",
                     a4, flags=re.M)
    cores = section(result.stdout, "GPU guide: tensor cores and lower precisions (cuda, 4096")
    capability = torch.cuda.get_device_capability()  # NVIDIA's rule; a GPU here is NVIDIA's
    offered = ["TF32", "bfloat16", "float16"] if capability >= (8, 0) else \
        ["float16"] if capability >= (7, 0) else []
    assert re.findall(r"^ *(\w+): +[\d.]+ ms, +[\d.]+x float32's speed$", cores, re.M) == offered


def test_a07_device_cpu_beside_the_gpus_runs_nothing_on_them(tmp_path):
    result = run_script("a07_gpu_single.py", "--device", "cpu", "--benchmark", "--sizes", "64",
                        cwd=tmp_path, env=REAL_DEVICES)
    assert result.returncode == 0, result.stderr
    assert "Training device: cpu (--device cpu).\n" in result.stdout
    assert "--device cpu: the CPU alone, so there is no second column" in result.stdout
    assert "GPU guide: tensor cores and lower precisions (cpu, 64 x 64)" in result.stdout
    assert loss_lines(section(result.stdout, "9.2 Single-GPU training")) == TUTORIAL_LOSS_LINES


def ddp_lines_ok(result, nproc: int) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    for kind in ("Training", "Test"):
        assert sorted(re.findall(rf"^\[GPU(\d+)\] {kind} accuracy 1\.0$", result.stdout,
                                 re.M)) == sorted(str(rank) for rank in range(nproc))
    assert f"Parameters identical in all {nproc} processes: True" in result.stdout


@pytest.mark.parametrize("launch", [pytest.param("torchrun", marks=torchrun_starts), "spawn",
                                    pytest.param("launch", marks=torchrun_starts)])
def test_a08_nccl_on_every_gpu(launch, tmp_path):
    """torchrun, --spawn, and the deprecated torch.distributed.launch (its --local-rank)."""
    command = {"torchrun": a08_command(nproc=GPUS), "spawn": a08_command("--spawn", str(GPUS)),
               "launch": [*a08_command(nproc=GPUS)[:1], "-m", "torch.distributed.launch",
                          *a08_command(nproc=GPUS)[3:]]}[launch]
    ddp_lines_ok(run(command, tmp_path, REAL_DEVICES, timeout=300), GPUS)


def test_a08_snapshot_saved_and_resumed_under_nccl(tmp_path):
    """One epoch saved by every GPU's process, then the text's three: two more, resumed."""
    snapshot = str(tmp_path / "s.pt")
    first = run(a08_command("--spawn", str(GPUS), "--snapshot", snapshot,
                            script=a08_with_epochs(tmp_path, 1)), tmp_path, REAL_DEVICES, 300)
    ddp_lines_ok(first, GPUS)
    resumed = run(a08_command("--spawn", str(GPUS), "--snapshot", snapshot), tmp_path,
                  REAL_DEVICES, timeout=300)
    ddp_lines_ok(resumed, GPUS)
    assert "Resuming from epoch 1" in resumed.stdout
    assert sorted(set(re.findall(r"^\[GPU0\] Epoch: (\d+)/003", resumed.stdout, re.M))) == \
        ["002", "003"]


def test_a08_more_processes_than_gpus_fall_back_to_gloo(tmp_path):
    result = run_script("a08_ddp_torchrun.py", "--spawn", str(GPUS + 1), cwd=tmp_path,
                        env=REAL_DEVICES, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"Note: training on the CPU: {GPUS + 1} processes on this "
                                    f"machine but only {GPUS} GPU(s)")
    assert f"Parameters identical in all {GPUS + 1} processes: True" in result.stdout
    assert "[CPU0] Test accuracy 1.0" in result.stdout


def test_a08_more_processes_than_gpus_is_refused(tmp_path):
    result = run_script("a08_ddp_torchrun.py", "--spawn", str(GPUS + 1), "--device", "cuda",
                        cwd=tmp_path, env=REAL_DEVICES)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(
        f"argument --device cuda: {GPUS + 1} processes on this machine but only {GPUS} GPU(s), "
        f"and NCCL refuses two processes on one GPU; start {GPUS}, or use --device cpu")


def test_a07_gpu_guides_on_cuda(tmp_path):
    result = run_script("a07_gpu_single.py", "--gpu-guides", cwd=tmp_path, timeout=300,
                        env=REAL_DEVICES)
    assert result.returncode == 0, result.stderr
    text = section(result.stdout, "GPU how-to and GPU guide: device basics")
    assert "torch.cuda.current_device(): 0" in text
    assert re.search(r"^y\.get_device\(\): 0", text, flags=re.M)
    assert "x.to(\"cuda:0\"): tensor([ 8,  9, 10], device='cuda:0')" in text
    mixed = section(result.stdout, "GPU guide: mixed precision")
    assert re.search(r" float16: losses [\d., ]+; training accuracy 1\.0", mixed)
    memory = section(result.stdout, "GPU guide: batch size, memory and gradient checkpointing")
    assert "CUDA peak, plain" in memory
    assert "Gradients with checkpointing equal those without: True" in memory
