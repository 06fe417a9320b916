"""The learners' machines no one here can run, each described once (its build of torch, its
GPUs, where it runs, its OS) and simulated by patching, after torch has loaded, what torch and
the system answer there (test_machines.py runs the scripts on each)."""

from __future__ import annotations

import platform
import subprocess
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from common import devices

INDEX = "https://download.pytorch.org/whl"
# torch's own list of its CUDA builds, as torch 2.13's: {cuda: {host: codes}}
CUDA_BUILDS = {"12.6": {"x86_64": {50, 60, 70, 75, 80, 86, 90}, "aarch64": {80, 90}},
               "12.9": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 120}}}
# what each build is built for (torch.cuda.get_arch_list()): CUDA's sm_XY, ROCm's gfx names
BUILDS = {
    "cpu": [],
    "cu126": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "cu128": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],  # PyPI's Linux
    "sm80": ["sm_80", "sm_90"],  # a build of one's own: sm_80's code runs on sm_86
    "ptx90": ["sm_90", "compute_90"],  # PTX, which the driver compiles for newer GPUs
    "rocm6.4": ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100",
                "gfx1101", "gfx1102", "gfx1200", "gfx1201"],
}


@dataclass(frozen=True)
class Machine:
    """``gpus``: (name, capability or gfx) each; torch sees them where its build is a GPU
    build (and, for NVIDIA's, the driver, ``nvidia-smi``, shows them). ``notebook``: the
    variable Colab or Kaggle sets; ``container``: /.dockerenv there."""
    build: str = "cpu"
    gpus: tuple = ()
    system: str = "Linux"
    machine: str = "x86_64"
    notebook: str | None = None
    container: bool = False
    cuda_starts: bool = True  # False: after a laptop's suspend, torch's CUDA fails to start
    cuda_error: str = ("CUDA unknown error - this may be due to an incorrectly set up "
                       "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after "
                       "program start. Setting the available devices to be zero.")  # its words
    smi_failure: tuple | None = None  # nvidia-smi's (exit status, stdout) where it fails
    pci_order: tuple | None = None  # the GPUs' indices in nvidia-smi's order, where not torch's
    mps: bool = False  # MPS available
    mps_built: bool = True
    macos: str = "15.1"
    translated: bool = False  # Rosetta
    env: tuple = ()  # (name, value) more
    jetson: bool = False

    @property
    def version(self) -> str:
        return "2.9.1+rocm6.4" if self.rocm else "2.13.0" + (
            "" if self.system == "Darwin" else f"+{self.build}")

    @property
    def rocm(self) -> bool:
        return self.build.startswith("rocm")

    @property
    def seen(self) -> tuple:
        """The GPUs torch sees."""
        return self.gpus if self.build != "cpu" and self.cuda_starts else ()


def simulate(machine: Machine, monkeypatch, folder) -> None:
    """Torch and the system answer as on ``machine``, in this process, until the test ends."""
    seen = machine.seen
    cuda = None if machine.rocm or machine.build == "cpu" else \
        f"{machine.build[2:4]}.{machine.build[4:]}" if machine.build[2:].isdigit() else "12.6"
    for name in ("CUDA_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION", *devices.NOTEBOOKS):
        monkeypatch.delenv(name, raising=False)
    for name, value in (*machine.env, *([(machine.notebook, "1")] if machine.notebook else [])):
        monkeypatch.setenv(name, value)
    for name, present in ((".dockerenv", machine.container), ("nv_tegra_release", machine.jetson)):
        if present:
            (folder / name).write_text("# R36 (release), REVISION: 4.0\n" if machine.jetson else "")
    monkeypatch.setattr(devices, "CONTAINER_FILES", (str(folder / ".dockerenv"),))
    monkeypatch.setattr(devices, "JETSON_RELEASE", str(folder / "nv_tegra_release"))
    monkeypatch.setattr(platform, "system", lambda: machine.system)
    monkeypatch.setattr(platform, "machine", lambda: machine.machine)
    monkeypatch.setattr(platform, "mac_ver", lambda: (machine.macos, ("", "", ""), machine.machine))
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: answer(machine, command))
    monkeypatch.setattr(torch, "__version__", machine.version)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", "6.4.43484" if machine.rocm else None)
    monkeypatch.setattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", CUDA_BUILDS, raising=False)

    def number(index) -> int:  # torch takes None, an index, "cuda:1" or a torch.device
        index = torch.device(index) if isinstance(index, str) else index
        return (index.index or 0) if isinstance(index, torch.device) else index or 0

    def properties(index=None):  # ROCm's capability: gfx1032 (10, 3), gfx90a (9, 0)
        name, arch = seen[number(index)]
        digits = arch[3:].split(":")[0] if machine.rocm else ""
        major, minor = (int(digits[:-2]), int(digits[-2])) if machine.rocm else arch
        return SimpleNamespace(name=name, gcnArchName=arch if machine.rocm else "",
                               major=major, minor=minor)

    def init():
        if not machine.cuda_starts:
            raise RuntimeError(machine.cuda_error)

    def is_available() -> bool:  # a CUDA build whose CUDA fails warns so (torch/cuda/__init__.py)
        if cuda and machine.gpus and not machine.cuda_starts:
            warnings.warn(f"CUDA initialization: {machine.cuda_error} (Triggered internally at "
                          f"/pytorch/c10/cuda/CUDAFunctions.cpp:119.)", UserWarning, stacklevel=2)
        return bool(seen)
    accelerator = "cuda" if seen else "mps" if machine.mps else None
    for module, query, value in [
            (torch.cuda, "is_available", is_available),
            (torch.cuda, "device_count", lambda: len(seen)),
            (torch.cuda, "get_arch_list", lambda: BUILDS[machine.build]),
            (torch.cuda, "get_device_name", lambda index=None: seen[number(index)][0]),
            (torch.cuda, "get_device_capability",
             lambda index=None: (properties(index).major, properties(index).minor)),
            (torch.cuda, "get_device_properties", properties), (torch.cuda, "init", init),
            (torch.backends.mps, "is_available", lambda: bool(machine.mps)),
            (torch.backends.mps, "is_built", lambda: machine.mps_built)] + ([
            (torch.accelerator, "is_available", lambda: accelerator is not None),
            (torch.accelerator, "current_accelerator",
             lambda: torch.device(accelerator) if accelerator else None)]
            if hasattr(torch, "accelerator") else []):
        monkeypatch.setattr(module, query, value)


def answer(machine: Machine, command: list[str]) -> subprocess.CompletedProcess:
    """The commands devices runs, as the machine answers them: NVIDIA's driver (nvidia-smi lists
    in the PCI bus's order; where it fails, its words go to stdout with a non-zero status:
    anderskm/gputil#26, #55), macOS's."""
    order = machine.pci_order or range(len(machine.gpus))
    nvidia = [machine.gpus[i] for i in order if machine.gpus[i][0].startswith(("NVIDIA", "Tesla"))]
    if command[0] == "nvidia-smi" and machine.smi_failure:  # its words, on stdout
        return subprocess.CompletedProcess(command, machine.smi_failure[0],
                                           machine.smi_failure[1], "")
    if command[0] == "nvidia-smi" and nvidia:
        lines = "".join(f"{name}, {cap[0]}.{cap[1]}\n" for name, cap in nvidia)
        return subprocess.CompletedProcess(command, 0, lines, "")
    if command[0] == "sysctl" and machine.system == "Darwin":
        return subprocess.CompletedProcess(command, 0, "1\n" if machine.translated else "", "")
    raise FileNotFoundError(2, "No such file or directory", command[0])

