"""The learners' machines no one here can run (tests/machines.py), each a row of one table: a01,
a07 (as it starts, and with --device cpu --benchmark) and a08 run on it, in this process, and
every note they print is the row's, true of that machine and about the device the script uses.
Beside it: torch's build tables, too few GPUs, Windows' gloo, a torch without torch.distributed,
pyproject's markers, and (stress) the default suite on a machine with CUDA or MPS."""

import os
import platform
import re
import subprocess
import sys
from typing import NamedTuple

import pytest
import torch
from answers import hide_distributed
from machines import CUDA_BUILDS, INDEX, Machine, simulate

from common import devices, gpu_howto, measure, runner
from conftest import ROOT, clean_env, fake_commands, run_main, section

RTX_5090, RTX_3090 = ("NVIDIA GeForce RTX 5090", (12, 0)), ("NVIDIA GeForce RTX 3090", (8, 6))
RX_7900, RX_6600 = ("AMD Radeon RX 7900 XTX", "gfx1100"), ("AMD Radeon RX 6600", "gfx1032")
RYZEN_IGPU = ("AMD Radeon Graphics", "gfx1036")  # a Ryzen 7000's, which ROCm lists beside the card
ROCM = ("gfx900 gfx906 gfx908 gfx90a gfx942 gfx1030 gfx1100 gfx1101 gfx1102 gfx1200 gfx1201")
CU126 = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"
CU129_ADVICE = (f'pip install "torch==2.13.0+cu129" --extra-index-url {INDEX}/cu129 installs '
                f"torch 2.13.0 built for CUDA 12.9, which runs on this GPU")
CU126_ADVICE = (f'pip install "torch==2.13.0+cu126" --extra-index-url {INDEX}/cu126 installs '
                f"torch 2.13.0 built for CUDA 12.6, which runs on this GPU")


def cpu_build_beside(gpu: str, windows: bool = False) -> str:
    return (f"this machine has an NVIDIA GPU ({gpu}), but torch 2.13.0+cpu is a CPU-only build"
            f"{', as PyPI' + chr(39) + 's torch for Windows always is' if windows else ''}, so "
            f"everything runs on the CPU; {CU129_ADVICE}")


def not_built_for(gpu: int, name: str, arch: str, build: str, listed: str, advice: str) -> str:
    failure = ("GPU operation would fail with 'HIP error: invalid device function'"
               if arch.startswith("gfx") else
               "CUDA operation would fail with 'no kernel image is available'")
    return (f"GPU {gpu}, {name}, is {arch}, which torch {build} was not built for ({listed}): "
            f"its first {failure}; {advice}; or use --device cpu")


HOSTED = " (torch, a CUDA build, sees none)"
COLAB_CPU = ("this Colab runtime has no GPU: choose one under Runtime > Change runtime type (a "
             "T4), then run the cells again")
COLAB = COLAB_CPU + HOSTED
KAGGLE = ("this Kaggle notebook has no accelerator: choose a GPU under the notebook's Settings > "
          "Accelerator, then run the cells again" + HOSTED)
DOCKER = ("this runs in a container, where torch (a CUDA build) sees no GPU: if the machine has "
          "an NVIDIA GPU, start the container with it (docker run --gpus all, once the machine "
          "has NVIDIA's Container Toolkit)")
SUSPENDED = ("this machine has an NVIDIA GPU (NVIDIA GeForce RTX 3090), but CUDA cannot start in "
             "torch 2.13.0+cu126 (CUDA unknown error), so everything runs on the CPU; after a "
             "laptop's suspend, reboot; in a container, start it with the GPUs (docker run "
             "--gpus all); a driver too old: update it (nvidia-smi shows its CUDA version)")
RTX_5090_LINE = not_built_for(0, RTX_5090[0], "sm_120", "2.13.0+cu126", CU126, CU129_ADVICE)
P100_LINE = not_built_for(0, "Tesla P100-PCIE-16GB", "sm_60", "2.13.0+cu128",
                          "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", CU126_ADVICE)
BESIDE_3090 = not_built_for(0, RTX_5090[0], "sm_120", "2.13.0+cu126", CU126,
                            "CUDA_VISIBLE_DEVICES=1 before each command hides it, leaving GPU 1 "
                            "(NVIDIA GeForce RTX 3090), which it was built for")
IGPU_LINE = not_built_for(1, RYZEN_IGPU[0], "gfx1036", "2.9.1+rocm6.4", ROCM,
                          "HIP_VISIBLE_DEVICES=0 before each command hides it, leaving GPU 0 (AMD "
                          "Radeon RX 7900 XTX), which it was built for")
# CUDA_VISIBLE_DEVICES=2,3 chosen already: torch's GPU 1 is the machine's 3
BESIDE_3090_OF_4 = BESIDE_3090.replace("CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=3")
# on Windows, a variable set in PowerShell's form and cmd's (bash's is an error in both)
BESIDE_3090_WINDOWS = not_built_for(0, RTX_5090[0], "sm_120", "2.13.0+cu126", CU126,
                                    '$env:CUDA_VISIBLE_DEVICES="1" in PowerShell (cmd: set '
                                    "CUDA_VISIBLE_DEVICES=1) before the commands hides it, leaving"
                                    " GPU 1 (NVIDIA GeForce RTX 3090), which it was built for")
RX_6600_LINE = not_built_for(0, RX_6600[0], "gfx1032", "2.9.1+rocm6.4", ROCM,
                             "HSA_OVERRIDE_GFX_VERSION=10.3.0 before each command (an RDNA2 "
                             "card: ROCm then runs gfx1030's code on it), or install a ROCm build "
                             f"of torch that lists gfx1032 ({devices.SELECTOR})")
MACOS_13 = ("MPS is off: torch 2.13.0 supports Apple's GPU only on macOS 14 or newer, and this "
            "Mac runs macOS 13.6.1; update macOS, or install an older torch (pip install "
            '"torch<2.9")')
NO_METAL = ("this Mac has Apple's GPU and torch 2.13.0 is built for it, but this process sees no "
            "Metal device: something hides the GPU from it, a sandbox or a virtual machine (an "
            "IDE's or an agent's sandbox, a VM, a container; this project's tests hide it on "
            "purpose); run it from macOS's own Terminal")
ROSETTA = ("this Python is an Intel (x86_64) build running under Rosetta on an Apple-silicon Mac, "
           "so it gets torch 2.2.2 at most, whose MPS there computes argmax wrongly "
           "(pytorch/pytorch#98191); install a native arm64 Python (python.org's installer, or "
           "Homebrew's in /opt/homebrew), then make .venv again with it")
# nvidia-smi's own words where the driver fails (anderskm/gputil#26, #55): exit status 9, 18
SMI_9 = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
         "that the latest NVIDIA driver is installed and running.\n\n")
SMI_18 = "Failed to initialize NVML: Driver/library version mismatch\n"


def driver_fails(said: str) -> str:
    return (f"nvidia-smi fails here ({said}), so the NVIDIA driver is not working and everything "
            f"runs on the CPU; reboot (a driver updated since the last boot says so), and if it "
            f"still fails, install the driver again")


# CUDA on an NVSwitch node without NVIDIA's fabric manager (huggingface/huggingface_hub#4134)
ERROR_802 = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
             "calling NumCudaDevices() that might have already set an error? Error 802: system "
             "not yet initialized")
H100, A100 = ("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0))
FABRIC = ("this machine has an NVIDIA GPU (NVIDIA H100 80GB HBM3), but CUDA cannot start in torch "
          "2.13.0+cu126 (Error 802: system not yet initialized): NVIDIA's fabric manager is not "
          "running; install nvidia-fabricmanager for this driver's version (nvidia-smi shows "
          "it) and start it (systemctl enable --now nvidia-fabricmanager), or ask the cluster's "
          "admins; everything runs on the CPU meanwhile")
# a CPU build beside two GPUs, nvidia-smi listing the 3090 first: a build for both, not the first
TWO_GPUS = ("this machine has NVIDIA GPUs (NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 5090), but "
            "torch 2.13.0+cpu is a CPU-only build, so everything runs on the CPU; "
            + CU129_ADVICE.replace("this GPU", "these GPUs"))
SLURM_A100 = cpu_build_beside(A100[0]).replace(CU129_ADVICE, CU126_ADVICE)
JETSON = ("this is an NVIDIA Jetson, whose GPU torch 2.13.0+cpu cannot use: neither PyPI's nor "
          "PyTorch's ARM wheels are built for it; install NVIDIA's torch wheel for your JetPack "
          "version (NVIDIA's 'PyTorch for Jetson' page)")
WINDOWS_GLOO = ("on Windows the processes meet through gloo, which cannot carry CUDA tensors "
                "(pytorch/pytorch#186535); use --device cpu (or auto), or WSL2")
MPS_DIGITS = ("on MPS the losses may differ from the text's in the digits, and from run to run; "
              "--device cpu reproduces the text's")
MPS_ARGMAX = ("on an Intel Mac (or under Rosetta) MPS computes argmax wrongly "
              "(pytorch/pytorch#112186), and with it the accuracy; --device cpu trains on the CPU")


class Says(NamedTuple):
    """What the scripts tell that learner: a01's notes; where a07 trains ("cpu", "cuda", "mps",
    or "stops" with a01's last note) and its notes there (default: a01's); where a08 trains
    ("cpu", "nccl") and the note it prints first, if any."""
    a01: list
    a07: str = "cpu"
    a08: str = "cpu"
    a08_note: str | None = None
    a07_notes: list | None = None


ROWS = {  # a row: the machine, and in words beside it what a01 tells that learner
    # PyPI's CPU build on a laptop without a GPU: nothing to say
    "Linux laptop": (Machine(), Says([])),
    # PyPI's torch for Windows has no CUDA: the GPU unused, and the CUDA build that runs on it;
    # a08 on Windows could not use it even so (gloo)
    "Windows, RTX 5090, PyPI's CPU build": (
        Machine(system="Windows", machine="AMD64", gpus=(RTX_5090,)),
        Says([cpu_build_beside(RTX_5090[0], windows=True)], a08_note=WINDOWS_GLOO)),
    "Linux, RTX 5090, a CPU build": (Machine(gpus=(RTX_5090,)),
                                     Says([cpu_build_beside(RTX_5090[0])],
                                          a08_note=cpu_build_beside(RTX_5090[0]))),
    # Colab's CPU runtime: a CPU build (googlecolab/backend-info a724079, 2026-08-19,
    # pip-freeze.txt: torch 2.11.0+cpu; pip-freeze.gpu.txt: 2.11.0+cu128) in a container, no
    # GPU; the GPU comes from the notebook's setting, not from docker or another build
    "Colab CPU": (Machine(notebook="COLAB_RELEASE_TAG", container=True),
                  Says([COLAB_CPU], a08_note=COLAB_CPU)),
    "Colab CPU before 2026-08, a CUDA build": (
        Machine(build="cu126", notebook="COLAB_RELEASE_TAG", container=True),
        Says([COLAB], a08_note=COLAB)),
    "Kaggle, no accelerator": (Machine(build="cu126", notebook="KAGGLE_KERNEL_RUN_TYPE",
                                       container=True), Says([KAGGLE], a08_note=KAGGLE)),
    "Colab T4": (Machine(build="cu126", gpus=(("Tesla T4", (7, 5)),),
                         notebook="COLAB_RELEASE_TAG", container=True),
                 Says([], a07="cuda", a08="nccl")),
    # a container started without --gpus (or without NVIDIA's Container Toolkit)
    "Docker without --gpus": (Machine(build="cu126", container=True),
                              Says([DOCKER], a08_note=DOCKER)),
    "Docker, a CPU build": (Machine(container=True), Says([])),  # chosen for the CPU: silent
    "CUDA that cannot start": (Machine(build="cu126", gpus=(RTX_3090,), cuda_starts=False),
                               Says([SUSPENDED], a08_note=SUSPENDED)),
    "H100 SXM without the fabric manager": (
        Machine(build="cu126", gpus=(H100,), cuda_starts=False, cuda_error=ERROR_802),
        Says([FABRIC], a08_note=FABRIC)),
    # the driver not loaded (a kernel updated, Secure Boot), or updated without a reboot
    "Linux, the driver not running, a CPU build": (
        Machine(gpus=(RTX_3090,), smi_failure=(9, SMI_9)),
        Says([driver_fails(SMI_9.split(". ")[0])], a08_note=driver_fails(SMI_9.split(". ")[0]))),
    "Linux, a driver updated without a reboot, cu126": (
        Machine(build="cu126", gpus=(RTX_3090,), cuda_starts=False, smi_failure=(18, SMI_18)),
        Says([driver_fails(SMI_18.strip())], a08_note=driver_fails(SMI_18.strip()))),
    # SLURM sets CUDA_VISIBLE_DEVICES for every job given a GPU: not the learner's choice
    "SLURM job with an A100, a CPU build": (
        Machine(gpus=(A100,), env=(("CUDA_VISIBLE_DEVICES", "0"), ("SLURM_JOB_ID", "4242"),
                                   ("SLURM_JOB_GPUS", "3"), ("SLURM_GPUS_ON_NODE", "1"))),
        Says([SLURM_A100], a08_note=SLURM_A100)),
    "RTX 5090 and RTX 3090, a CPU build": (
        Machine(gpus=(RTX_5090, RTX_3090), pci_order=(1, 0)),
        Says([TWO_GPUS], a08_note=TWO_GPUS)),
    "RTX 3090, cu126": (Machine(build="cu126", gpus=(RTX_3090,)),
                        Says([], a07="cuda", a08="nccl")),
    "RTX 3090, a build for sm_80": (Machine(build="sm80", gpus=(RTX_3090,)),
                                    Says([], a07="cuda", a08="nccl")),
    "RTX 5090, a build with PTX": (Machine(build="ptx90", gpus=(RTX_5090,)),
                                   Says([], a07="cuda", a08="nccl")),
    # torch calls it available, then 'no kernel image': a07 stops before its first CUDA
    # operation, a08 trains on the CPU; the CUDA build that runs on it
    "RTX 5090, cu126": (Machine(build="cu126", gpus=(RTX_5090,)),
                        Says([RTX_5090_LINE], a07="stops", a08_note=RTX_5090_LINE)),
    # Kaggle's P100 under PyPI's Linux build from torch 2.8 (Kaggle/docker-python#1546)
    "Kaggle P100": (Machine(build="cu128", gpus=(("Tesla P100-PCIE-16GB", (6, 0)),),
                            notebook="KAGGLE_KERNEL_RUN_TYPE", container=True),
                    Says([P100_LINE], a07="stops", a08_note=P100_LINE)),
    # the card the build lacks is GPU 0: hiding it leaves GPU 1, which a07 and a08 would use
    "RTX 5090 beside an RTX 3090, cu126": (
        Machine(build="cu126", gpus=(RTX_5090, RTX_3090)),
        Says([BESIDE_3090], a07="stops", a08_note=BESIDE_3090)),
    "RTX 5090 beside an RTX 3090, CUDA_VISIBLE_DEVICES=2,3": (
        Machine(build="cu126", gpus=(RTX_5090, RTX_3090), env=(("CUDA_VISIBLE_DEVICES", "2,3"),)),
        Says([BESIDE_3090_OF_4], a07="stops", a08_note=BESIDE_3090_OF_4)),
    "RTX 5090 beside an RTX 3090, cu126, Windows": (
        Machine(build="cu126", gpus=(RTX_5090, RTX_3090), system="Windows", machine="AMD64"),
        Says([BESIDE_3090_WINDOWS], a07="stops", a08_note=WINDOWS_GLOO)),
    # ROCm lists the Ryzen's iGPU beside the card: GPU 0 works, GPU 1 is hidden, not overridden
    "AMD desktop, RX 7900 XTX and iGPU": (Machine(build="rocm6.4", gpus=(RX_7900, RYZEN_IGPU)),
                                          Says([IGPU_LINE], a07="cuda", a08="nccl",
                                               a07_notes=[])),
    "RX 6600, ROCm without gfx1032": (Machine(build="rocm6.4", gpus=(RX_6600,)),
                                      Says([RX_6600_LINE], a07="stops", a08_note=RX_6600_LINE)),
    "RX 6600, HSA_OVERRIDE_GFX_VERSION set": (
        Machine(build="rocm6.4", gpus=(RX_6600,), env=(("HSA_OVERRIDE_GFX_VERSION", "10.3.0"),)),
        Says([], a07="cuda", a08="nccl")),  # the learner chose what ROCm runs it as
    "MI210 (gcnArchName with features)": (
        Machine(build="rocm6.4", gpus=(("AMD Instinct MI210", "gfx90a:sramecc+:xnack-"),)),
        Says([], a07="cuda", a08="nccl")),
    "Apple-silicon Mac": (Machine(system="Darwin", machine="arm64", mps=True),
                          Says([], a07="mps", a07_notes=[MPS_DIGITS])),
    "Mac on macOS 13": (Machine(system="Darwin", machine="arm64", macos="13.6.1"),
                        Says([MACOS_13])),
    "Mac in a VM (no Metal device)": (Machine(system="Darwin", machine="arm64"),
                                      Says([NO_METAL])),
    "Mac, a torch built without MPS": (
        Machine(system="Darwin", machine="arm64", mps_built=False),
        Says(["torch 2.13.0 was built without MPS; install PyPI's torch for macOS"])),
    "Mac, Python under Rosetta": (Machine(system="Darwin", translated=True),
                                  Says([ROSETTA], a07_notes=[])),
    "Intel Mac, MPS on its AMD GPU": (Machine(system="Darwin", mps=True),
                                      Says([], a07="mps", a07_notes=[MPS_DIGITS, MPS_ARGMAX])),
    "Jetson, PyPI's ARM build": (Machine(machine="aarch64", jetson=True),
                                 Says([JETSON], a07_notes=[])),
}


def fast_timing(shape, device, dtype=torch.float32) -> float:
    """measure.time_matmul without the timing: the tensors are still made on ``device``."""
    torch.zeros(1, device=device, dtype=dtype)
    return 1e-3


def notes(text: str) -> list[str]:
    return [line.removeprefix("Note: ") for line in text.splitlines() if line.startswith("Note: ")]


@pytest.mark.filterwarnings("ignore:CUDA initialization")  # torch's own, where CUDA fails
@pytest.mark.parametrize("row", ROWS)
def test_every_note_is_true_on_the_learners_machine(row, monkeypatch, tmp_path, capsys):
    machine, says = ROWS[row]
    simulate(machine, monkeypatch, tmp_path)
    code, out, err = run_main("a01_tensors.py", [], capsys)
    assert (code, notes(section(out, "1.3 Installing"))) == (0, says.a01), err

    if says.a07 == "stops":  # before section 9.1's first operation on the GPU
        assert run_main("a07_gpu_single.py", [], capsys) == (1, "", f"error: {says.a01[-1]}\n")
    elif says.a07 == "cpu":
        if machine.gpus and machine.system != "Darwin":  # asked for, the GPU's line
            code, _, err = run_main("a07_gpu_single.py", ["--device", "cuda"], capsys)
            assert code == 2 and err.splitlines()[-1].endswith(
                f"--device cuda: {says.a01[-1]}; use --device auto or cpu"), err
        code, out, err = run_main("a07_gpu_single.py", [], capsys)
        assert code == 0, err
        assert "Training device: cpu (no accelerator found)." in out
    else:  # stopped at the seam after section 9.1 names the device, before anything moves
        # there (where CUDA really works, it would train: a test must not rest on it failing)
        shown = devices.show_device

        def show_then_stop(given):
            shown(given)
            raise SystemExit(3)
        monkeypatch.setattr(devices, "show_device", show_then_stop)
        code, out, err = run_main("a07_gpu_single.py", [], capsys)
        monkeypatch.setattr(devices, "show_device", shown)
        assert code == 3 and f"Training device: {says.a07}\n" in out, err
    if says.a07 != "stops":
        assert notes(section(out, "9.1")) == (says.a01 if says.a07_notes is None
                                              else says.a07_notes), out

    monkeypatch.setattr(measure, "time_matmul", fast_timing)  # --device cpu: nothing on a GPU
    code, out, err = run_main("a07_gpu_single.py", ["--device", "cpu", "--benchmark",
                                                    "--sizes", "64"], capsys)
    assert code == 0, err
    assert "--device cpu: the CPU alone, so there is no second column" in out
    assert "tensor cores and lower precisions (cpu, 64 x 64)" in out
    assert set(notes(out)) <= set(says.a01)

    chosen = []  # a08 up to its process group: the backend, for a GPU of its own or the CPU

    def init_process_group(backend, **kwargs):
        chosen.append(backend)
        raise SystemExit(3)  # its training is every machine's: test_a08.py
    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert (code, chosen) == (3, ["nccl" if says.a08 == "nccl" else "gloo"]), err
    assert notes(out) == ([f"training on the CPU: {says.a08_note}"] if says.a08_note else [])
    if torch.cuda.device_count() and says.a08 == "cpu":  # a GPU it cannot use: refused
        code, _, err = run_main("a08_ddp_torchrun.py", ["--device", "cuda"], capsys)
        assert code == 2 and err.splitlines()[-1].endswith(f"--device cuda: {says.a08_note}")


# torch's list of its builds as each torch has it: {cuda: {host: codes}} (2.13), {cuda: codes}
# (2.11, 2.12, read from their wheels), none (before 2.11)
BUILD_TABLES = {"2.13": CUDA_BUILDS, "2.12": {cuda: codes["x86_64"] for cuda, codes in
                                              CUDA_BUILDS.items()}, "2.10": None}


@pytest.mark.parametrize("torch_version", BUILD_TABLES)
def test_every_shape_of_torchs_build_table_gives_advice(torch_version, monkeypatch, tmp_path):
    """a01 crashed on 2.11 and 2.12 ('set' object has no attribute 'get'), just where the
    check matters: a CPU-only build beside an NVIDIA GPU (issue 41)."""
    simulate(Machine(gpus=(RTX_5090,)), monkeypatch, tmp_path)
    monkeypatch.setattr(torch, "__version__", f"{torch_version}.0+cpu")
    if BUILD_TABLES[torch_version] is None:
        monkeypatch.delattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", raising=False)
    else:
        monkeypatch.setattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", BUILD_TABLES[torch_version])
    [note] = devices.install_notes()
    assert note.endswith(CU129_ADVICE.replace("2.13", torch_version) if BUILD_TABLES[
        torch_version] else f"{devices.SELECTOR} gives the pip command for a CUDA build (add "
                            f"--force-reinstall)"), note


def test_a_pascal_gpu_under_torch_2_15_gets_the_last_torch_built_for_it(monkeypatch, tmp_path):
    """torch 2.15 has no cu126 wheels, the last for sm_50 to sm_70, though its table lists 12.6
    (pytorch/pytorch#190385): a GTX 1080 gets torch 2.14's cu126 build."""
    simulate(Machine(gpus=(("NVIDIA GeForce GTX 1080", (6, 1)),)), monkeypatch, tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.15.0+cpu")
    [note] = devices.install_notes()
    advice = (f'pip install "torch<2.15" --index-url {INDEX}/cu126 installs torch 2.14, the last '
              f"built for this GPU (sm_61: torch 2.15 needs sm_75 or newer)")
    assert note.endswith(advice), note
    # Python 3.15 has torch 2.15 only (rohitg00/ai-engineering-from-scratch#192)
    monkeypatch.setattr(platform, "python_version_tuple", lambda: ("3", "15", "0"))
    monkeypatch.setattr(platform, "python_version", lambda: "3.15.0")
    [note] = devices.install_notes()
    assert note.endswith(f"{advice}, for Python 3.10 to 3.14: make .venv again with one of them "
                         f"first (this is Python 3.15.0)"), note


@pytest.mark.parametrize("gpu, advice", [
    (("AMD Radeon RX 7700S", "gfx1103"), "HSA_OVERRIDE_GFX_VERSION=11.0.0"),  # RDNA3
    (("AMD Radeon 890M", "gfx1150"), "install a ROCm build"),  # no family ROCm lists
])
def test_what_an_amd_gpu_the_build_lacks_is_advised(gpu, advice, monkeypatch, tmp_path):
    simulate(Machine(build="rocm6.4", gpus=(gpu,)), monkeypatch, tmp_path)
    [note] = devices.install_notes()
    assert f"is {gpu[1]}," in note and advice in note
    assert ("HSA_OVERRIDE" in note) == advice.startswith("HSA")


def test_a08_judges_the_gpus_its_processes_take(monkeypatch, tmp_path):
    """The AMD desktop: one process takes GPU 0, which the build has; a second would take the
    iGPU, which it lacks."""
    simulate(ROWS["AMD desktop, RX 7900 XTX and iGPU"][0], monkeypatch, tmp_path)
    assert devices.gpu_shortage(1) is None and devices.gpu_shortage(2) == IGPU_LINE


@pytest.mark.parametrize("row", ["Mac on macOS 13", "Mac in a VM (no Metal device)"])
def test_a07_device_mps_where_mps_is_off_says_why(row, monkeypatch, tmp_path, capsys):
    """--device mps had said 'it needs an Apple-silicon Mac' on one."""
    simulate(ROWS[row][0], monkeypatch, tmp_path)
    code, _, err = run_main("a07_gpu_single.py", ["--device", "mps"], capsys)
    assert code == 2 and err.splitlines()[-1].endswith(
        f"argument --device mps: MPS is not available here: {ROWS[row][1].a01[0]}; use --device "
        f"auto or cpu")


def test_the_gpu_guides_on_the_cpu_beside_a_gpu_the_build_lacks(monkeypatch, tmp_path, capsys):
    """--gpu-guides --device cpu beside an RTX 5090 under cu126: the how-to's GPU lines are left
    to a run on the GPU, saying so (the guide's parts all run on a07's device)."""
    simulate(ROWS["RTX 5090, cu126"][0], monkeypatch, tmp_path)
    monkeypatch.setattr(torch.nn, "DataParallel", None)  # any use of it fails
    gpu_howto.run(torch.device("cpu"))
    out = capsys.readouterr().out
    assert "would name GPU 0 (this run is on cpu)" in out and "no such GPU" not in out
    assert "this run is on cpu, so the model runs unwrapped" in out


@pytest.mark.parametrize("system, gpus, processes, reason", [
    ("Windows", 2, 2, "on Windows the processes meet through gloo, which cannot carry CUDA "
                      "tensors (pytorch/pytorch#186535); use --device cpu (or auto), or WSL2"),
    ("Linux", 1, 2, "2 processes on this machine but only 1 GPU(s), and NCCL refuses two "
                    "processes on one GPU; start 1, or use --device cpu"),
])
def test_a08_trains_on_the_cpu_where_the_gpus_cannot_serve_and_says_why(
        system, gpus, processes, reason, monkeypatch, capsys):
    from common import flags
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))  # as --spawn's processes have it
    spawn = ["a08_ddp_torchrun.py", "--spawn", str(processes)]
    monkeypatch.setattr(sys, "argv", spawn)
    flags.a08(None)
    assert capsys.readouterr().out == f"Note: training on the CPU: {reason}\n"
    assert not devices.gpu_of_its_own("auto")
    monkeypatch.setattr(sys, "argv", [*spawn, "--device", "cuda"])
    with pytest.raises(SystemExit):
        flags.a08(None)
    assert capsys.readouterr().err.endswith(f"error: argument --device cuda: {reason}\n")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 * processes)
    assert devices.gpu_of_its_own("auto") is (system == "Linux")
    assert not devices.gpu_of_its_own("cpu")


def test_the_fall_back_is_said_on_the_machine_that_falls_back(monkeypatch, capsys):
    """Two machines whose GPUs differ: the second (RANK 2 and 3) has one GPU for its two
    processes and trains on the CPU; its first process says so there, where the learner reads
    that machine's output (global rank 0 is on the other machine)."""
    from common import flags
    monkeypatch.setattr(platform, "system", lambda: "Linux")  # two Linux machines
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(sys, "argv", ["a08_ddp_torchrun.py"])
    for rank, local_rank in ((2, 0), (3, 1)):
        for name, value in dict(RANK=rank, LOCAL_RANK=local_rank, WORLD_SIZE=4,
                                LOCAL_WORLD_SIZE=2, MASTER_ADDR="10.0.0.1").items():
            monkeypatch.setenv(name, str(value))
        flags.a08(None)
        assert capsys.readouterr().out == ("Note: training on the CPU: 2 processes on this "
                                           "machine but only 1 GPU(s), and NCCL refuses two "
                                           "processes on one GPU; start 1, or use --device cpu"
                                           "\n" if local_rank == 0 else "")


def test_a_torch_without_torch_distributed(monkeypatch, capsys, tmp_path):
    """AMD's torch for Windows (ROCm/TheRock#1179, #2008): a06's error path crashed on
    dist.is_initialized; a01 says a08 cannot run (its import of the text's line fails)."""
    hide_distributed(monkeypatch)
    code, out, _ = run_main("a01_tensors.py", [], capsys)
    assert code == 0
    assert f"Note: torch {torch.__version__} was built without torch.distributed, so section " \
           f"9.3's a08 cannot run with it" in out
    monkeypatch.chdir(tmp_path)
    assert run_main("a06_save_load.py", ["--load", "missing.pth"], capsys)[::2] == (
        1, "error: missing.pth: no such file; check the path, or train and save first\n")


MACHINE_MARKERS = {"windows": {"sys_platform": "win32", "platform_machine": "AMD64"},
                   "linux": {"sys_platform": "linux", "platform_machine": "x86_64"},
                   "an Intel Mac": {"sys_platform": "darwin", "platform_machine": "x86_64"},
                   "an Apple silicon Mac": {"sys_platform": "darwin", "platform_machine": "arm64"}}


@pytest.mark.parametrize("machine, accepted, refused", [
    # torch 2.4.0 for Windows lacks a DLL (pytorch#131662)
    ("windows", ["torch 2.4.1", "torch 2.15.0", "numpy 2.0.0"],
     ["torch 2.4.0", "torch 2.3.1", "numpy 1.26.4"]),
    ("linux", ["torch 2.4.0", "torch 2.15.0", "numpy 2.0.0"], ["torch 2.3.1", "numpy 1.26.4"]),
    ("an Apple silicon Mac", ["torch 2.4.0", "torch 2.15.0", "numpy 2.0.0"],
     ["torch 2.3.1", "numpy 1.26.4"]),
    # PyTorch's last wheels there: 2.2.2, built against NumPy 1.x
    ("an Intel Mac", ["torch 2.2.2", "numpy 1.26.4"], ["torch 2.4.0", "numpy 2.0.0"]),
])
def test_pip_install_asks_each_machine_for_a_torch_that_works_there(machine, accepted, refused):
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    from packaging.requirements import Requirement
    requirements = [Requirement(line) for line in tomllib.loads(
        (ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]]
    here = [r for r in requirements if r.marker.evaluate(MACHINE_MARKERS[machine])]
    assert sorted(r.name for r in here) == ["numpy", "torch"], here
    specifier = {r.name: r.specifier for r in here}

    def allows(package_version: str) -> bool:
        name, version = package_version.split()
        return version in specifier[name]

    assert [v for v in accepted if not allows(v)] == []
    assert [v for v in refused if allows(v)] == []


MACHINES = {"pretend_cuda": "torch.cuda.is_available()", "pretend_mps":
            "torch.backends.mps.is_available()"}


def test_an_intel_gpu_is_named_and_trained_on_when_asked(monkeypatch, capsys):
    """Intel's XPU (hexgrad/kokoro#273): section 9.1 shows it, and 9.2's line (CUDA, MPS) would
    train on the CPU without a word: a07 says so, and --device xpu is accepted."""
    from common import flags
    monkeypatch.setattr(devices, "accelerator", lambda: "xpu")
    devices.show_device(None)
    assert capsys.readouterr().out == (
        "Training device: xpu\nNote: section 9.2's line looks for CUDA and MPS only, so it "
        "trains on the CPU; --device xpu trains on this xpu\n")
    assert flags.a07_device("xpu") == torch.device("xpu")


NCCL_SHM = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
            "or device error. \nLast error:\nError while creating shared memory segment "
            "/dev/shm/nccl-vzIpS6 (size 9637888)")


def test_nccls_last_error_names_the_cause(capsys):
    """NCCL in Docker with a small /dev/shm (pytorch/torchtitan#853, NVIDIA/nccl#342): the line
    keeps NCCL's 'Last error', which names the cause, not only its first line."""
    def main():
        raise torch.distributed.DistBackendError(NCCL_SHM)
    with pytest.raises(SystemExit):
        runner.run(main)
    assert capsys.readouterr().err == (
        "error: process 0: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.21.5; last error: Error while creating shared memory segment "
        "/dev/shm/nccl-vzIpS6 (size 9637888) (see TROUBLESHOOTING.md: \"error: process N\")\n")


@fake_commands
@pytest.mark.stress
def test_the_default_suite_passes_on_machines_with_an_accelerator(tmp_path):
    """The whole default suite where CUDA works (shims/pretend_cuda: what is asked onto CUDA
    stays on the CPU, as an H100 would take it, with NVIDIA's nvidia-smi naming it), so that no
    test passes only because this torch lacks CUDA; its device-dependent files on a Mac. Both at
    once; the gpu tests are .ci/gpu-check's."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0'\n")
    smi.chmod(0o755)
    env = {"pretend_cuda": {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
           "pretend_mps": {}}
    files = {"pretend_cuda": [], "pretend_mps": [
        "tests/test_sections.py", "tests/test_a08.py", "tests/test_gpu_articles.py",
        "tests/test_flags.py", "tests/test_snapshots.py", "tests/test_machines.py"]}
    runs = {machine: subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "not stress and not gpu", *files[machine]],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env=clean_env(machine, accelerators=True) | env[machine]) for machine in MACHINES}
    for process in runs.values():
        out = process.communicate(timeout=900)[0]
        assert process.returncode == 0 and re.search(r"\d+ passed", out), out[-5000:]


@pytest.mark.stress
@pytest.mark.skipif(sys.platform == "win32", reason=".ci/gpu-check is a bash script")
def test_gpu_check_runs_every_step_and_fails_where_no_gpu_serves(tmp_path):
    """.ci/gpu-check where torch sees no CUDA GPU (every child here: shims/cpu_only): its gpu
    tests skip and its GPU runs train on the CPU, yet every step runs and is reported, each by
    what it printed, and it exits non-zero at the end."""
    result = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-check")], capture_output=True,
                            text=True, timeout=900, env=clean_env())
    reported = {name: result for result, name in
                re.findall(r"^##### (passed|FAILED): (.+)$", result.stdout, re.M)}
    gpu_tests = result.stdout[:result.stdout.index("##### the README's pytest")]
    assert reported == {"gpu tests": "FAILED", "the README's pytest": "passed",
                        "a07 on the GPU": "FAILED", "a07 --device cpu beside the GPUs": "passed",
                        "a08 under torchrun": "FAILED", "a08 --spawn 1": "FAILED"}, \
        gpu_tests[-3000:] + result.stdout[-3000:]
    assert re.search(r"^SKIPPED .*test_gpu\.py.*needs a CUDA GPU", gpu_tests, re.M), gpu_tests
    assert result.returncode == 1 and "^Training device: cuda$" in result.stdout
