"""The machines no one here can run, simulated by patching what torch and the system answer:
an install that cannot use this machine's GPU, Macs (Rosetta, macOS 13, MPS), Windows with GPUs,
too few GPUs; and the default suite on a machine with CUDA or MPS (shims/pretend_*)."""

import os
import platform
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from answers import hide_distributed

from common import devices, runner
from conftest import ROOT, WINDOWS, clean_env, fake_commands, run_main, section

INDEX = "https://download.pytorch.org/whl"
# torch's own list of its CUDA builds, as torch 2.13's:
CUDA_BUILDS = {"12.6": {"x86_64": {50, 60, 70, 75, 80, 86, 90}, "aarch64": {80, 90}},
               "12.9": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 120}}}


@pytest.fixture
def machine_with(monkeypatch, tmp_path):
    """``machine_with(gpu, capability, built_for)``: nvidia-smi lists ``gpu`` (None: no
    driver); with ``built_for`` this torch is a CUDA build that sees the GPU, else CPU-only."""
    def simulate(gpu=None, capability=None, built_for=None):
        if gpu:
            smi = tmp_path / "nvidia-smi"
            smi.write_text(f"#!/bin/sh\necho '{gpu}, {capability[0]}.{capability[1]}'\n")
            smi.chmod(0o755)
        monkeypatch.setenv("PATH", str(tmp_path))  # no real driver's nvidia-smi
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr(platform, "machine", lambda: "x86_64")
        monkeypatch.setattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", CUDA_BUILDS, raising=False)
        monkeypatch.setattr(torch, "__version__", "2.13.0+cu126" if built_for else "2.13.0+cpu")
        monkeypatch.setattr(torch.version, "cuda", "12.6" if built_for else None)
        for name, value in [("is_available", True), ("device_count", 1),
                            ("get_device_capability", capability), ("get_device_name", gpu),
                            ("get_arch_list", built_for)] if built_for else []:
            monkeypatch.setattr(torch.cuda, name, lambda *args, value=value: value)
        if built_for and hasattr(torch, "accelerator"):
            monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
            monkeypatch.setattr(torch.accelerator, "current_accelerator",
                                lambda: torch.device("cuda"))
    return simulate


@fake_commands
@pytest.mark.parametrize("system", ["Linux", "Windows"])
def test_a_cpu_only_build_beside_an_nvidia_gpu_is_named(system, machine_with, monkeypatch,
                                                        capsys):
    """PyPI's torch for Windows has no CUDA: an RTX 50xx trained on the CPU without a word."""
    machine_with("NVIDIA GeForce RTX 5090", (12, 0))
    monkeypatch.setattr(platform, "system", lambda: system)
    code, out, err = run_main("a01_tensors.py", [], capsys)
    note = section(out, "1.3 Installing").splitlines()[-1]
    assert code == 0 and note.startswith("Note: this machine has an NVIDIA GPU (NVIDIA GeForce "
                                         "RTX 5090), but torch 2.13.0+cpu is a CPU-only build")
    assert (", as PyPI's torch for Windows always is" in note) == (system == "Windows")
    assert note.endswith(f'pip install "torch==2.13.0+cu129" --extra-index-url {INDEX}/cu129 '
                         f"installs torch 2.13.0 built for CUDA 12.9, which runs on this GPU")
    code, out, err = run_main("a07_gpu_single.py", [], capsys)
    assert code == 0 and note in section(out, "9.1 Computations").splitlines(), err


# torch's list of its builds as each torch has it: {cuda: {host: codes}} (2.13), {cuda: codes}
# (2.11, 2.12, read from their wheels), none (before 2.11)
BUILD_TABLES = {"2.13": CUDA_BUILDS, "2.12": {cuda: codes["x86_64"] for cuda, codes in
                                              CUDA_BUILDS.items()}, "2.10": None}


@fake_commands
@pytest.mark.parametrize("torch_version", BUILD_TABLES)
def test_every_shape_of_torchs_build_table_gives_advice(torch_version, machine_with,
                                                         monkeypatch):
    """a01 crashed on 2.11 and 2.12 ('set' object has no attribute 'get'), just where the
    check matters: a CPU-only build beside an NVIDIA GPU (issue 41)."""
    machine_with("NVIDIA GeForce RTX 5090", (12, 0))
    monkeypatch.setattr(torch, "__version__", f"{torch_version}.0+cpu")
    if BUILD_TABLES[torch_version] is None:
        monkeypatch.delattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", raising=False)
    else:
        monkeypatch.setattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", BUILD_TABLES[torch_version])
    [note] = devices.install_notes()
    assert note.endswith(f'pip install "torch=={torch_version}.0+cu129" --extra-index-url '
                         f"{INDEX}/cu129 installs torch {torch_version}.0 built for CUDA 12.9, "
                         f"which runs on this GPU" if BUILD_TABLES[torch_version] else
                         "https://pytorch.org/get-started/locally/ gives the pip command for a "
                         "CUDA build (add --force-reinstall)"), note


@fake_commands
def test_a_pascal_gpu_under_torch_2_15_gets_the_last_torch_built_for_it(machine_with,
                                                                        monkeypatch):
    """torch 2.15 has no cu126 wheels, the last for sm_50 to sm_70, though its table lists 12.6
    (pytorch/pytorch#190385): a GTX 1080 gets torch 2.14's cu126 build."""
    machine_with("NVIDIA GeForce GTX 1080", (6, 1))
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


@fake_commands
def test_cuda_that_cannot_start_beside_an_nvidia_gpu_is_named(machine_with, monkeypatch,
                                                              capsys):
    """A CUDA build, a driver, a GPU, and CUDA failing to start (after a laptop's suspend; a
    container without /dev/nvidia-uvm: pytorch/pytorch#88639, #43281, #49081): torch warns and
    reports no GPU; a01, a07 and a08 say why, in torch's words."""
    machine_with("NVIDIA GeForce RTX 3060", (8, 6))
    monkeypatch.setattr(torch, "__version__", "2.13.0+cu128")
    monkeypatch.setattr(torch.version, "cuda", "12.8")

    def init():
        raise RuntimeError("CUDA unknown error - this may be due to an incorrectly set up "
                           "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after "
                           "program start. Setting the available devices to be zero.")
    monkeypatch.setattr(torch.cuda, "init", init)
    code, out, err = run_main("a01_tensors.py", [], capsys)
    note = section(out, "1.3 Installing").splitlines()[-1].removeprefix("Note: ")
    assert code == 0 and "but CUDA cannot start in torch 2.13.0+cu128 (CUDA unknown error)" in note
    assert "after a laptop's suspend, reboot" in note and "docker run --gpus all" in note
    code, out, err = run_main("a07_gpu_single.py", [], capsys)
    assert code == 0 and f"Note: {note}" in section(out, "9.1 Computations").splitlines(), err
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert code == 0 and out.splitlines()[0] == f"Note: training on the CPU: {note}", err


@fake_commands
@pytest.mark.parametrize("gpu, capability, built_for, advice", [
    ("NVIDIA GeForce RTX 5090", (12, 0), ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86",
                                          "sm_90"], "cu129"),  # a new card, cu126's build
    ("NVIDIA GeForce GTX 1080", (6, 1), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100",
                                         "sm_120"], "cu126"),  # an old card a build dropped
    # Kaggle's P100 under PyPI's Linux build from torch 2.8 (Kaggle/docker-python#1546)
    ("Tesla P100-PCIE-16GB", (6, 0), ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100",
                                      "sm_120"], "cu126"),
])
def test_a_gpu_missing_from_the_build_is_named_before_its_first_cuda_operation(
        gpu, capability, built_for, advice, machine_with, capsys):
    """torch calls the GPU available, then fails: 'no kernel image is available'
    (pytorch/pytorch#150733, #167244). a01 names it; a07 stops in one line before section
    9.1's first CUDA operation; a08 trains on the CPU and says why, or refuses --device cuda."""
    machine_with(gpu, capability, built_for)
    line = (f"GPU 0, {gpu}, is sm_{capability[0]}{capability[1]}, which torch 2.13.0+cu126 was "
            f"not built for ({' '.join(built_for)}): its first CUDA operation would fail with "
            f"'no kernel image is available'; pip install \"torch==2.13.0+{advice}\" "
            f"--extra-index-url {INDEX}/{advice} installs torch 2.13.0 built for CUDA "
            f"{'12.9' if advice == 'cu129' else '12.6'}, which runs on this GPU; or use "
            f"--device cpu")
    code, out, _ = run_main("a01_tensors.py", [], capsys)
    assert section(out, "1.3 Installing").splitlines()[-1] == f"Note: {line}"
    assert run_main("a07_gpu_single.py", [], capsys) == (1, "", f"error: {line}\n")
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"Note: training on the CPU: {line}"
    code, _, err = run_main("a08_ddp_torchrun.py", ["--device", "cuda"], capsys)
    assert code == 2 and err.splitlines()[-1].endswith(f"argument --device cuda: {line}")


@fake_commands
@pytest.mark.parametrize("gpu, capability, built_for", [
    (None, None, None),  # no NVIDIA driver: a CPU-only build is all there is to have
    ("NVIDIA GeForce RTX 3090", (8, 6), ["sm_80", "sm_90"]),  # sm_80's code runs on sm_86
    ("NVIDIA GeForce RTX 5090", (12, 0), ["sm_90", "compute_90"]),  # PTX compiles for it
])
def test_no_advice_where_the_build_fits_or_no_driver_is_there(gpu, capability, built_for,
                                                              machine_with):
    machine_with(gpu, capability, built_for)
    assert devices.install_notes() == []


ROCM_BUILD = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101",
              "gfx1102", "gfx1200", "gfx1201"]  # a ROCm wheel's list (torch.cuda.get_arch_list())


@pytest.fixture
def amd_machine(monkeypatch, tmp_path):
    """``amd_machine(name, gfx)``: a ROCm build of torch (ROCM_BUILD) that sees one AMD GPU, as
    torch answers there: available as `cuda`, ``torch.version.hip`` set, the GPU's
    architecture in ``gcnArchName``."""
    def simulate(name, gfx):
        monkeypatch.setattr(platform, "system", lambda: "Linux")  # ROCm's torch: Linux
        monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.delenv("HSA_OVERRIDE_GFX_VERSION", raising=False)
        monkeypatch.setattr(torch, "__version__", "2.9.1+rocm6.4")
        monkeypatch.setattr(torch.version, "cuda", None)
        monkeypatch.setattr(torch.version, "hip", "6.4.43484")
        properties = SimpleNamespace(name=name, gcnArchName=gfx, major=10, minor=3)
        for module, query, value in [
                (torch.cuda, "is_available", True), (torch.cuda, "device_count", 1),
                (torch.cuda, "get_arch_list", ROCM_BUILD), (torch.cuda, "get_device_name", name),
                (torch.cuda, "get_device_properties", properties),
                *([(torch.accelerator, "is_available", True),
                   (torch.accelerator, "current_accelerator", torch.device("cuda"))]
                  if hasattr(torch, "accelerator") else [])]:
            monkeypatch.setattr(module, query, lambda *args, value=value: value)
    return simulate


RX_6600_LINE = (
    f"GPU 0, AMD Radeon RX 6600, is gfx1032, which torch 2.9.1+rocm6.4 was not built for "
    f"({' '.join(ROCM_BUILD)}): its first GPU operation would fail with 'HIP error: invalid "
    f"device function'; put HSA_OVERRIDE_GFX_VERSION=10.3.0 before each command (an RDNA2 card: "
    f"ROCm then runs gfx1030's code on it), or install a ROCm build of torch that lists gfx1032 "
    f"({devices.SELECTOR}); or use --device cpu")


@pytest.mark.parametrize("gfx", ["gfx1032", "gfx1032:sramecc+:xnack-"])
def test_an_amd_gpu_missing_from_the_rocm_build_is_named_before_its_first_gpu_operation(
        gfx, amd_machine, capsys):
    """An RX 6600 (gfx1032) under a build listing gfx1030: torch calls it available, then 'HIP
    error: invalid device function'. a01 names it; a07 stops in one line before section 9.1's
    first GPU operation; --device cpu runs."""
    amd_machine("AMD Radeon RX 6600", gfx)
    code, out, _ = run_main("a01_tensors.py", [], capsys)
    assert code == 0 and section(out, "1.3 Installing").splitlines()[-1] == f"Note: {RX_6600_LINE}"
    assert run_main("a07_gpu_single.py", [], capsys) == (1, "", f"error: {RX_6600_LINE}\n")
    code, out, err = run_main("a07_gpu_single.py", ["--device", "cpu"], capsys)
    assert code == 0 and "Training device: cpu (--device cpu)." in out, err


@pytest.mark.skipif(WINDOWS, reason="AMD's torch for Windows lacks torch.distributed: no a08")
def test_a08_beside_an_amd_gpu_the_build_lacks_trains_on_the_cpu_or_refuses_cuda(amd_machine,
                                                                                   capsys):
    """As beside an NVIDIA GPU the build lacks: the CPU, saying why; --device cuda refused."""
    amd_machine("AMD Radeon RX 6600", "gfx1032")
    code, out, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"Note: training on the CPU: {RX_6600_LINE}"
    code, _, err = run_main("a08_ddp_torchrun.py", ["--device", "cuda"], capsys)
    assert code == 2 and err.splitlines()[-1].endswith(f"argument --device cuda: {RX_6600_LINE}")


@pytest.mark.parametrize("name, gfx, override, advice", [
    ("AMD Radeon RX 7600", "gfx1102", None, None),  # listed: nothing to say
    ("AMD Radeon RX 6600", "gfx1032", "10.3.0", None),  # the learner chose what it runs as
    ("AMD Radeon RX 7700S", "gfx1103", None, "HSA_OVERRIDE_GFX_VERSION=11.0.0"),  # RDNA3
    ("AMD Radeon 890M", "gfx1150", None, "install a ROCm build"),  # no family ROCm lists
])
def test_which_amd_gpus_get_a_line_and_what_it_advises(name, gfx, override, advice,
                                                     amd_machine, monkeypatch):
    amd_machine(name, gfx)
    if override:
        monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", override)
    notes = devices.install_notes()
    if advice is None:
        assert notes == [] and devices.gpu_shortage(1) is None
    else:
        assert len(notes) == 1 and f"is {gfx}," in notes[0] and advice in notes[0]
        assert ("HSA_OVERRIDE" in notes[0]) == advice.startswith("HSA")


@pytest.fixture
def mac(monkeypatch):
    """``mac(machine, macos, mps_built=True, translated="")``: torch answers as on that Mac."""
    def simulate(machine, macos, mps_built=True, translated=""):
        monkeypatch.setattr(platform, "system", lambda: "Darwin")
        monkeypatch.setattr(platform, "machine", lambda: machine)
        monkeypatch.setattr(platform, "mac_ver", lambda: (macos, ("", "", ""), machine))
        monkeypatch.setattr(torch.backends.mps, "is_built", lambda: mps_built)
        def run(command, **kwargs):  # sysctl answers; nvidia-smi is not there
            if command[0] != "sysctl":
                raise FileNotFoundError(command[0])
            return subprocess.CompletedProcess(command, 0, translated, "")

        monkeypatch.setattr(subprocess, "run", run)
    return simulate


MACOS_13 = ("MPS is off: torch 2.13.0+cpu supports Apple's GPU only on macOS 14 or newer, and "
            "this Mac runs macOS 13.6.1; update macOS, or install an older torch (pip install "
            '"torch<2.9")')


def test_an_apple_silicon_mac_on_macos_13_is_told_why_mps_is_off(mac, monkeypatch, capsys):
    """torch 2.9+ dropped MPS before macOS 14 (pytorch/pytorch#164943, #163515): a01 printed
    False, a07 'no accelerator found', and --device mps 'needs an Apple-silicon Mac'."""
    mac("arm64", "13.6.1")
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    out = run_main("a01_tensors.py", [], capsys)[1]
    assert section(out, "1.3 Installing").splitlines()[-1] == f"Note: {MACOS_13}"
    out = run_main("a07_gpu_single.py", [], capsys)[1]
    assert f"Training device: cpu (no accelerator found).\nNote: {MACOS_13}\n" in out
    code, _, err = run_main("a07_gpu_single.py", ["--device", "mps"], capsys)
    assert code == 2 and err.splitlines()[-1].endswith(
        f"argument --device mps: MPS is not available here: {MACOS_13}; use --device auto or "
        f"cpu")


NO_METAL = ("this Mac has Apple's GPU and torch 2.13.0+cpu is built for it, but this process "
            "sees no Metal device: something hides the GPU from it, a sandbox or a virtual "
            "machine")


def test_an_apple_silicon_mac_whose_process_sees_no_metal_device(mac, monkeypatch, capsys):
    """macOS 26 in a sandbox or a VM (pytorch/pytorch#167679, #177819, #125197): MPS built,
    not available. a01 and a07 name that, not 'it needs an Apple-silicon Mac'."""
    mac("arm64", "26.1")
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    out = run_main("a01_tensors.py", [], capsys)[1]
    assert section(out, "1.3 Installing").splitlines()[-1].startswith(f"Note: {NO_METAL}")
    code, _, err = run_main("a07_gpu_single.py", ["--device", "mps"], capsys)
    assert code == 2 and f"MPS is not available here: {NO_METAL}" in err
    assert "Apple-silicon Mac;" not in err


@pytest.mark.parametrize("machine, macos, built, translated, note", [
    ("arm64", "14.5", False, "", "torch 2.13.0+cpu was built without MPS; install PyPI's torch "
                                 "for macOS"),
    ("x86_64", "15.1", True, "1\n", "this Python is an Intel (x86_64) build running under "
                                    "Rosetta on an Apple-silicon Mac, so it gets torch 2.2.2 at "
                                    "most, whose MPS there computes argmax wrongly "
                                    "(pytorch/pytorch#98191); install a native arm64 Python"),
    ("x86_64", "13.6", True, "", None),  # an Intel Mac: torch 2.2.2 is its torch
    ("arm64", "14.5", True, "", NO_METAL),  # a sandbox's or a VM's process: no Metal device
])
def test_other_macs(machine, macos, built, translated, note, mac, monkeypatch):
    mac(machine, macos, built, translated)
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    notes = devices.install_notes()
    assert len(notes) == (note is not None) and all(n.startswith(f"Note: {note}") for n in notes)


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


@pytest.mark.parametrize("machine", ["arm64", "x86_64"])
def test_a07_on_mps_says_its_digits_may_differ(machine, monkeypatch, capsys):
    """rasbt/LLMs-from-scratch#635, #791, #1020: MPS gives other digits, run to run. An Intel
    Mac's MPS (an AMD GPU), or MPS under Rosetta, computes int64 argmax wrongly
    (pytorch/pytorch#112186, #92311, #98191): the accuracy a07 prints would be wrong."""
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(devices, "accelerator", lambda: "mps")
    devices.show_device(None)
    assert capsys.readouterr().out == (
        "Training device: mps\nNote: on MPS the losses may differ from the text's in the "
        "digits, and from run to run; --device cpu reproduces the text's\n" + (
            "Note: on an Intel Mac (or under Rosetta) MPS computes argmax wrongly "
            "(pytorch/pytorch#112186), and with it the accuracy; --device cpu trains on the "
            "CPU\n" if machine == "x86_64" else ""))


def test_a_jetson_is_named_before_any_advice_for_pip(machine_with, monkeypatch, tmp_path,
                                                     capsys):
    """A Jetson (JetPack 6 has nvidia-smi, JetPack 5 none) with PyPI's aarch64 torch: no
    wheel of PyPI's or PyTorch's index uses its GPU (dusty-nv/jetson-inference#1932)."""
    machine_with()  # no nvidia-smi, a CPU-only torch
    release = tmp_path / "nv_tegra_release"
    release.write_text("# R36 (release), REVISION: 4.0\n")
    monkeypatch.setattr(devices, "JETSON_RELEASE", str(release))
    out = run_main("a01_tensors.py", [], capsys)[1]
    assert section(out, "1.3 Installing").splitlines()[-1] == (
        "Note: this is an NVIDIA Jetson, whose GPU torch 2.13.0+cpu cannot use: neither PyPI's "
        "nor PyTorch's ARM wheels are built for it; install NVIDIA's torch wheel for your "
        "JetPack version (NVIDIA's 'PyTorch for Jetson' page)")
    monkeypatch.setattr(devices, "JETSON_RELEASE", str(tmp_path / "absent"))
    assert devices.install_notes() == []


def test_a_container_started_without_the_gpus_says_how_to_start_it(machine_with, monkeypatch,
                                                                   tmp_path):
    """Docker without --gpus (or without NVIDIA's Container Toolkit: 'could not select device
    driver "" with capabilities: [[gpu]]'): no nvidia-smi inside, a CUDA build that sees
    nothing, and a01 was silent."""
    machine_with()
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    (tmp_path / ".dockerenv").touch()
    monkeypatch.setattr(devices, "CONTAINER_FILES", (str(tmp_path / ".dockerenv"),))
    assert devices.install_notes() == [
        "Note: this runs in a container, where torch (a CUDA build) sees no GPU: if the machine "
        "has an NVIDIA GPU, start the container with it (docker run --gpus all, once the "
        "machine has NVIDIA's Container Toolkit)"]
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build: chosen for the CPU
    assert devices.install_notes() == []


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
    """Its device-dependent files, as on a CUDA machine (with NVIDIA's nvidia-smi) and a Mac,
    both at once."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0'\n")
    smi.chmod(0o755)
    env = {"pretend_cuda": {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
           "pretend_mps": {}}
    runs = {machine: subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "not stress and not gpu", "tests/test_sections.py", "tests/test_a08.py",
         "tests/test_gpu_articles.py", "tests/test_flags.py", "tests/test_snapshots.py"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env=clean_env(machine, accelerators=True) | env[machine]) for machine in MACHINES}
    for process in runs.values():
        out = process.communicate(timeout=900)[0]
        assert process.returncode == 0 and re.search(r"\d+ passed", out), out[-5000:]
