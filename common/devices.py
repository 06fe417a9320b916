"""Devices, not the tutorial's code: whether this install fits this machine (a01: each way it
misses the GPU is one line, with the command that fits), the device a07 shows, whether a08's
processes have a GPU each."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from collections import namedtuple
from collections.abc import Iterable

import torch
import torch.distributed

from common.runner import words

INDEX = "https://download.pytorch.org/whl"  # PyTorch's own wheels, a folder per CUDA version
SELECTOR = "https://pytorch.org/get-started/locally/"


def accelerator() -> str | None:
    """'cuda', 'mps', ... or None: torch.accelerator (2.6+), else CUDA and MPS asked."""
    api = getattr(torch, "accelerator", None)
    if api is not None and hasattr(api, "current_accelerator"):
        return api.current_accelerator().type if api.is_available() else None
    return "cuda" if torch.cuda.is_available() else \
        "mps" if torch.backends.mps.is_available() else None


def install_notes() -> list[str]:
    """a01: a line for each way this install does not fit this machine."""
    notes = [rosetta(), mps_off(), jetson() or gpu_unused(), gpu_missing_from_build(),
             no_distributed()]
    return [f"Note: {note}" for note in notes if note]


def rosetta() -> str | None:
    """macOS says 1 for sysctl.proc_translated in a translated process (an Intel Mac: nothing)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if platform.system() == "Darwin" and platform.machine() == "x86_64" and subprocess.run(
                ["sysctl", "-in", "sysctl.proc_translated"], capture_output=True, text=True,
                timeout=10).stdout.strip() == "1":
            return ("this Python is an Intel (x86_64) build running under Rosetta on an "
                    "Apple-silicon Mac, so it gets torch 2.2.2 at most, whose MPS there computes "
                    "argmax wrongly (pytorch/pytorch#98191); install a native arm64 Python "
                    "(python.org's installer, or Homebrew's in /opt/homebrew), then make .venv "
                    "again with it")
    return None


def mps_off() -> str | None:
    """Why an Apple-silicon Mac's GPU (MPS) is off with this torch, where torch can tell."""
    if platform.system() != "Darwin" or platform.machine() != "arm64" or \
            torch.backends.mps.is_available():
        return None
    if not torch.backends.mps.is_built():
        return f"torch {torch.__version__} was built without MPS; install PyPI's torch for macOS"
    macos = platform.mac_ver()[0]
    if macos.split(".")[0].isdigit() and int(macos.split(".")[0]) < 14:
        return (f"MPS is off: torch {torch.__version__} supports Apple's GPU only on macOS 14 "
                f"or newer, and this Mac runs macOS {macos}; update macOS, or install an "
                f'older torch (pip install "torch<2.9")')
    return (f"this Mac has Apple's GPU and torch {torch.__version__} is built for it, but this "
            f"process sees no Metal device: something hides the GPU from it, a sandbox or a "
            f"virtual machine (an IDE's or an agent's sandbox, a VM, a container; this "
            f"project's tests hide it on purpose); run it from macOS's own Terminal")


def mps_argmax_wrong() -> str | None:
    """An Intel Mac's MPS (an AMD GPU), or MPS under Rosetta: argmax is wrong there, and so
    compute_accuracy (pytorch/pytorch#112186, #92311, #98191, #109067)."""
    if platform.system() != "Darwin" or platform.machine() != "x86_64":
        return None
    return ("on an Intel Mac (or under Rosetta) MPS computes argmax wrongly "
            "(pytorch/pytorch#112186), and with it the accuracy; --device cpu trains on the CPU")


JETSON_RELEASE = "/etc/nv_tegra_release"  # JetPack's release file, on every Jetson


def jetson() -> str | None:
    """A Jetson, whose GPU no PyPI or PyTorch wheel uses (JetPack 5 has no nvidia-smi)."""
    if torch.cuda.is_available() or not os.path.exists(JETSON_RELEASE):
        return None
    return (f"this is an NVIDIA Jetson, whose GPU torch {torch.__version__} cannot use: "
            f"neither PyPI's nor PyTorch's ARM wheels are built for it; install NVIDIA's torch "
            f"wheel for your JetPack version (NVIDIA's 'PyTorch for Jetson' page)")


def no_distributed() -> str | None:
    """AMD's torch for Windows (ROCm/TheRock#1179, #2008) lacks torch.distributed."""
    if torch.distributed.is_available():
        return None
    return (f"torch {torch.__version__} was built without torch.distributed, so section "
            f"9.3's a08 cannot run with it (ImportError: cannot import name "
            f"'destroy_process_group'); the other scripts can. For a08: PyPI's torch in "
            f"another environment, or Linux (WSL2 on Windows)")


def gpu_unused() -> str | None:
    """An NVIDIA GPU the driver shows (nvidia-smi) and torch does not use: a CPU-only build, or
    CUDA failing to start (a laptop's suspend, a container without /dev/nvidia-uvm, an old
    driver, an NVSwitch node without its fabric manager); nvidia-smi failing: the driver; none:
    container_without_gpus. CUDA_VISIBLE_DEVICES set by the learner (not by SLURM for its job):
    someone chose."""
    if torch.cuda.is_available() or ("CUDA_VISIBLE_DEVICES" in os.environ and
                                     not any(map(os.environ.get, SLURM_GPUS))):
        return None
    driver = nvidia_smi()
    if driver is None or (driver.failure and hosted()):  # a notebook: its setting first
        return container_without_gpus()
    if driver.failure:
        return (f"nvidia-smi fails here ({driver.failure}), so the NVIDIA driver is not working "
                f"and everything runs on the CPU; reboot (a driver updated since the last boot "
                f"says so), and if it still fails, install the driver again")
    named = (f"an NVIDIA GPU ({driver.gpus[0][0]})" if len(driver.gpus) == 1 else
             f"NVIDIA GPUs ({', '.join(name for name, _ in driver.gpus)})")
    if torch.version.cuda is None:
        windows = ", as PyPI's torch for Windows always is" if platform.system() == "Windows" \
            else ""
        return (f"this machine has {named}, but torch {torch.__version__} is a CPU-only build"
                f"{windows}, so everything runs on the CPU; "
                f"{install_advice([cap for _, cap in driver.gpus])}")
    try:
        torch.cuda.init()
        reason, error = "it finds no GPU", ""
    except Exception as err:  # torch's own words for why
        reason, error = words(err).split(" - ")[0], str(err)
    if "Error 802" in error:  # "system not yet initialized": an NVSwitch node (A100/H100 SXM)
        return (f"this machine has {named}, but CUDA cannot start in torch {torch.__version__} "
                f"(Error 802: system not yet initialized): NVIDIA's fabric manager is not "
                f"running; install nvidia-fabricmanager for this driver's version (nvidia-smi "
                f"shows it) and start it (systemctl enable --now nvidia-fabricmanager), or ask "
                f"the cluster's admins; everything runs on the CPU meanwhile")
    return (f"this machine has {named}, but CUDA cannot start in torch "
            f"{torch.__version__} ({reason}), so everything runs on the CPU; after a laptop's "
            f"suspend, reboot; in a container, start it with the GPUs (docker run --gpus all); "
            f"a driver too old: update it (nvidia-smi shows its CUDA version)")


# What SLURM sets in a job given GPUs, beside the CUDA_VISIBLE_DEVICES it sets for each (sbatch's
# OUTPUT ENVIRONMENT VARIABLES; its GRES documentation)
SLURM_GPUS = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")
CONTAINER_FILES = ("/.dockerenv", "/run/.containerenv")  # Docker's, Podman's
# Hosted notebooks, containers too, each with a variable of its own: the GPU is a setting
NOTEBOOKS = {"COLAB_RELEASE_TAG": "this Colab runtime has no GPU: choose one under Runtime > "
                                  "Change runtime type (a T4)", "KAGGLE_KERNEL_RUN_TYPE": "this "
             "Kaggle notebook has no accelerator: choose a GPU under the notebook's Settings > "
             "Accelerator"}


def hosted() -> str | None:
    """The hosted notebook's note on choosing a GPU, in Colab or Kaggle; else None."""
    return next((NOTEBOOKS[name] for name in NOTEBOOKS if name in os.environ), None)


def container_without_gpus() -> str | None:
    """gpu_unused, where no driver shows: a hosted notebook without a GPU, whatever its build
    (Colab's CPU runtime has a CPU build, its GPU runtime a CUDA one: googlecolab/backend-info's
    pip-freeze.txt and pip-freeze.gpu.txt); a CUDA build in a container started without the
    GPUs (no --gpus, or no Container Toolkit), or with none."""
    if notebook := hosted():
        build = " (torch, a CUDA build, sees none)" if torch.version.cuda else ""
        return f"{notebook}, then run the cells again{build}"
    if torch.version.cuda is None or not any(map(os.path.exists, CONTAINER_FILES)):
        return None
    return ("this runs in a container, where torch (a CUDA build) sees no GPU: if the machine "
            "has an NVIDIA GPU, start the container with it (docker run --gpus all, once the "
            "machine has NVIDIA's Container Toolkit)")


def gpu_missing_from_build(indices: Iterable[int] | None = None) -> str | None:
    """The line for the first GPU of ``indices`` (default: all) torch calls available and this
    build has no code for (an RTX 50xx under cu126, an AMD GPU a ROCm build does not list);
    beside GPUs it has, the variable that hides it. HSA_OVERRIDE_GFX_VERSION set: none."""
    hip = bool(torch.version.hip)
    built_for = [arch.split(":")[0] for arch in torch.cuda.get_arch_list()] \
        if torch.cuda.is_available() and (hip or torch.version.cuda) else []
    if not built_for or (hip and "HSA_OVERRIDE_GFX_VERSION" in os.environ):
        return None
    gpus = range(torch.cuda.device_count())
    missing = [i for i in gpus if (gfx(i) not in ("", *built_for) if hip else
                                   not runs_on(capability(i), built_for))]
    if not (mine := [i for i in (gpus if indices is None else indices) if i in missing]):
        return None
    index, usable = mine[0], [i for i in gpus if i not in missing]
    arch = gfx(index) if hip else "sm_{}{}".format(*capability(index))
    if usable:  # an override would change every GPU: hide this one instead
        variable = f"{'HIP' if hip else 'CUDA'}_VISIBLE_DEVICES"
        advice = (f"{for_each_command(variable, ','.join(visible_as(variable, usable)))} hides "
                  f"it, leaving " + ", ".join(f"GPU {i} ({torch.cuda.get_device_name(i)})"
                                              for i in usable) + ", which it was built for")
    elif hip:
        value, runs_as, family = GFX_OVERRIDES.get(arch[:6], (None, None, None))
        advice = (f"{for_each_command('HSA_OVERRIDE_GFX_VERSION', value)} (an {family} card: "
                  f"ROCm then runs {runs_as}'s code on it), or " if runs_as in built_for
                  else "") + f"install a ROCm build of torch that lists {arch} ({SELECTOR})"
    else:
        advice = install_advice([capability(index)])
    failure = ("GPU operation would fail with 'HIP error: invalid device function'" if hip else
               "CUDA operation would fail with 'no kernel image is available'")
    return (f"GPU {index}, {torch.cuda.get_device_name(index)}, is {arch}, which torch "
            f"{torch.__version__} was not built for ({' '.join(built_for)}): its first "
            f"{failure}; {advice}; or use --device cpu")


def for_each_command(name: str, value: str) -> str:
    """How the learner's shell sets ``name`` for the commands after it: bash's form, or on
    Windows PowerShell's and cmd's (bash's is an error in both)."""
    if platform.system() == "Windows":
        return f'$env:{name}="{value}" in PowerShell (cmd: set {name}={value}) before the commands'
    return f"{name}={value} before each command"


def visible_as(variable: str, indices: list[int]) -> list[str]:
    """torch's GPU numbers as ``variable`` names them: where it already picks GPUs (2,3), the
    number torch calls 1 is 3 there."""
    chosen = [gpu.strip() for gpu in os.environ.get(variable, "").split(",") if gpu.strip()]
    return [chosen[i] if len(chosen) > i else str(i) for i in indices]


def capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)  # (12, 0): sm_120


def gfx(index: int) -> str:
    """An AMD GPU as ROCm's builds list it: gcnArchName less its features (gfx90a:sramecc+)."""
    return getattr(torch.cuda.get_device_properties(index), "gcnArchName", "").split(":")[0]


# What ROCm runs an AMD GPU it has no code for as (HSA_OVERRIDE_GFX_VERSION), by family: an
# RDNA2 card (RX 6000, gfx103x) as gfx1030, an RDNA3 one (RX 7000, gfx110x) as gfx1100
GFX_OVERRIDES = {"gfx103": ("10.3.0", "gfx1030", "RDNA2"), "gfx110": ("11.0.0", "gfx1100", "RDNA3")}


Driver = namedtuple("Driver", "gpus failure")  # nvidia-smi's GPUs; or its words where it fails


def nvidia_smi() -> Driver | None:
    """The driver's GPUs, (name, compute capability, None from old drivers) each, in nvidia-smi's
    order (the PCI bus's, not torch's fastest-first); where it fails (exit status 9: "NVIDIA-SMI
    has failed because it couldn't communicate with the NVIDIA driver..."; 18: "Failed to
    initialize NVML: Driver/library version mismatch"; on stdout), its first line. None without
    nvidia-smi."""
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        said = (result.stdout.strip() or result.stderr.strip()).partition("\n")[0]
        return Driver([], said.split(". ")[0].rstrip(".") or f"exit status {result.returncode}")
    gpus = []
    for name, _, cap in (line.partition(",") for line in result.stdout.splitlines()):
        major, _, minor = cap.strip().partition(".")
        if name.strip():
            gpus.append((name.strip(), (int(major), int(minor)) if (major + minor).isdigit()
                         else None))
    return Driver(gpus, None) if gpus else None


def runs_on(capability: tuple[int, int], built_for: list[str]) -> bool:
    """sm_XY runs on XY's major version, minor XY and up; compute_XY (PTX) on any GPU from XY."""
    for kind, _, number in (arch.partition("_") for arch in built_for):
        if (number := number.rstrip("af")).isdigit():
            code = (int(number[:-1]), int(number[-1]))
            if (kind == "sm" and code[0] == capability[0] and code[1] <= capability[1]) or \
                    (kind == "compute" and code <= capability):
                return True
    return False


def install_advice(capabilities: list[tuple[int, int] | None]) -> str:
    """pip's command for this release built for the oldest CUDA that runs on every GPU listed
    (the oldest driver), from torch's list of its builds (PYTORCH_RELEASES_CODE_CC: {cuda: {host:
    codes}}, {cuda: codes} in 2.11 and 2.12). From 2.15 none runs before sm_75 (2.14's cu126).
    A capability None (an old driver's nvidia-smi) fits any."""
    known = [cap for cap in capabilities if cap is not None]
    release = torch.__version__.split("+")[0]
    oldest = min(known, default=None)
    these = "this GPU" if len(capabilities) == 1 else "these GPUs"
    if oldest is not None and oldest < (7, 5) and \
            tuple(map(int, release.split(".")[:2])) >= (2, 15):
        newer = tuple(map(int, platform.python_version_tuple()[:2])) >= (3, 15)
        return (f'pip install "torch<2.15" --index-url {INDEX}/cu126 installs torch 2.14, the '
                f"last built for {these} (sm_{oldest[0]}{oldest[1]}: torch 2.15 needs "
                f"sm_75 or newer)" + (f", for Python 3.10 to 3.14: make .venv again with one of "
                f"them first (this is Python {platform.python_version()})" if newer else ""))
    releases = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None)
    if not isinstance(releases, dict):
        return f"{SELECTOR} gives the pip command for a CUDA build (add --force-reinstall)"
    host = "aarch64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
    fitting = sorted((tuple(map(int, cuda.split("."))), cuda) for cuda, codes in
                     releases.items() if all(runs_on(cap, [
                         f"sm_{code}" for code in (codes.get(host, ()) if isinstance(codes, dict)
                                                   else codes)]) for cap in known))
    if not fitting:
        return f"no CUDA build of torch {release} runs on {these}; another may ({SELECTOR})"
    tag = "cu" + fitting[0][1].replace(".", "")
    # --extra-index-url: torch+cuXXY is only on PyTorch's index, and what it needs that the
    # index lacks at times comes from PyPI (pytorch/pytorch#172926, #193491)
    return (f'pip install "torch=={release}+{tag}" --extra-index-url {INDEX}/{tag} installs torch '
            f"{release} built for CUDA {fitting[0][1]}, which runs on {these}")


def gpu_shortage(processes_here: int) -> str | None:
    """Why this machine's processes cannot have a CUDA GPU each, or None (torch's answer)."""
    if platform.system() == "Windows":  # no NCCL; gloo crashes on CUDA tensors from 2.8
        return ("on Windows the processes meet through gloo, which cannot carry CUDA tensors "
                "(pytorch/pytorch#186535); use --device cpu (or auto), or WSL2")
    gpus = torch.cuda.device_count()
    if gpus == 0:
        return "this machine has no usable CUDA GPU; use --device cpu (or auto)"
    if processes_here > gpus:
        return (f"{processes_here} processes on this machine but only {gpus} GPU(s), and NCCL "
                f"refuses two processes on one GPU; start {gpus}, or use --device cpu")
    return gpu_missing_from_build(range(processes_here))  # the GPUs its processes take


def gpu_of_its_own(kind: str) -> bool:
    """a08 --device: whether each process here trains on a CUDA GPU of its own (flags.a08)."""
    return kind != "cpu" and gpu_shortage(int(os.environ.get("LOCAL_WORLD_SIZE", 1))) is None


def device_to_show(device: torch.device | None) -> torch.device:
    """a07's section 9.1: --device, else the accelerator, else the CPU."""
    return device or torch.device(accelerator() or "cpu")


def show_device(given: torch.device | None) -> torch.device:
    """Section 9.1's device (device_to_show), named; on the CPU, why, and what a GPU prints."""
    device = device_to_show(given)
    if device.type != "cpu":
        print(f"Training device: {device}")
        if device.type == "mps":  # rasbt/LLMs-from-scratch#635, #791, #1020
            print("Note: on MPS the losses may differ from the text's in the digits, and from "
                  "run to run; --device cpu reproduces the text's")
            if wrong := mps_argmax_wrong():
                print(f"Note: {wrong}")
        elif device.type != "cuda" and given is None:  # Intel's XPU (hexgrad/kokoro#273)
            print(f"Note: section 9.2's line looks for CUDA and MPS only, so it trains on the "
                  f"CPU; --device {device.type} trains on this {device.type}")
        return device
    print(f"Training device: cpu ({'--device cpu' if given else 'no accelerator found'}).")
    for note in filter(None, (mps_off(), gpu_unused())):
        print(f"Note: {note}")
    print("On a GPU the same addition prints tensor([5., 7., 9.], device='cuda:0'), and\n"
          "adding a CPU tensor to a GPU tensor raises RuntimeError: Expected all tensors\n"
          "to be on the same device. Every tensor in one operation must live on one device.")
    return device
