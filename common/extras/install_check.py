"""Whether this install fits this machine: our addition to section 1.3's check (a01). a07 and
a08 make the GPU checks again before their first CUDA operation. Each cause is one line:

- an Intel (x86_64) Python under Rosetta on an Apple-silicon Mac;
- a CPU-only build beside an NVIDIA driver (PyPI's torch for Windows is always one): the
  driver's ``nvidia-smi``, installed with it on Linux and Windows, names the GPU;
- a GPU whose architecture the build was not compiled for (an RTX 50xx, sm_120, under a build
  for CUDA 12.6; an old card a new build dropped), which torch reports as available and which
  then fails with "no kernel image is available for execution on the device".

with the command that installs a build that fits. A machine without ``nvidia-smi`` gets
nothing: no advice about CUDA builds where no NVIDIA driver is installed.
"""

from __future__ import annotations

import platform
import shutil
import subprocess

import torch

INDEX = "https://download.pytorch.org/whl"  # PyTorch's own wheels, one folder per CUDA version
SELECTOR = "https://pytorch.org/get-started/locally/"


def install_notes() -> list[str]:
    """a01: a line for each way this install does not fit this machine."""
    notes = [rosetta_note(), cpu_build_beside_an_nvidia_gpu(), gpu_missing_from_the_build()]
    return [f"Note: {note}" for note in notes if note]


def rosetta_note() -> str | None:
    """An Intel (x86_64) Python running under Rosetta on an Apple-silicon Mac (pip gives it
    Intel Macs' torch, 2.2.2 at most, without MPS), or None. macOS says 1 for
    ``sysctl.proc_translated`` in a translated process; an Intel Mac has no such key (``-i``:
    sysctl then prints nothing)."""
    if platform.system() != "Darwin" or platform.machine() != "x86_64":
        return None
    try:
        answer = subprocess.run(["sysctl", "-in", "sysctl.proc_translated"],
                                capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if answer.strip() != "1":
        return None  # an Intel Mac: 2.2.2 is its torch (README: Windows, macOS, notebooks)
    return ("this Python is an Intel (x86_64) build running under Rosetta on an "
            "Apple-silicon Mac, so it gets torch 2.2.2 at most and no MPS; install a native "
            "arm64 Python (python.org's installer, or Homebrew's in /opt/homebrew), then "
            "make .venv again with it")


def cpu_build_beside_an_nvidia_gpu() -> str | None:
    """A torch without CUDA on a machine whose NVIDIA driver lists a GPU, or None."""
    if torch.version.cuda is not None or torch.cuda.is_available():
        return None  # a CUDA build (or ROCm's, or a simulated GPU)
    gpu = first_gpu_nvidia_smi_names()
    if gpu is None:
        return None
    name, capability = gpu
    windows = ", as PyPI's torch for Windows always is" if platform.system() == "Windows" else ""
    return (f"this machine has an NVIDIA GPU ({name}), but torch {torch.__version__} is a "
            f"CPU-only build{windows}, so everything runs on the CPU; "
            f"{install_advice(capability)}")


def gpu_missing_from_the_build() -> str | None:
    """A GPU whose architecture this CUDA build has no code for, or None."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return None  # no CUDA build, or a driver too old for it (torch warns about that)
    built_for = torch.cuda.get_arch_list()
    for index in range(torch.cuda.device_count()):
        capability = torch.cuda.get_device_capability(index)
        if built_for and not runs_on(capability, built_for):
            return (f"GPU {index}, {torch.cuda.get_device_name(index)}, is sm_"
                    f"{capability[0]}{capability[1]}, which torch {torch.__version__} was not "
                    f"built for ({' '.join(built_for)}): its first CUDA operation would fail "
                    f"with 'no kernel image is available'; {install_advice(capability)}; or "
                    f"use --device cpu")
    return None


def first_gpu_nvidia_smi_names() -> tuple[str, tuple[int, int] | None] | None:
    """(name, compute capability) of the first GPU that ``nvidia-smi`` lists (the capability is
    None where the driver is too old to say it), or None without nvidia-smi or a GPU."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    for fields in ("name,compute_cap", "name"):
        try:
            answer = subprocess.run([nvidia_smi, f"--query-gpu={fields}",
                                     "--format=csv,noheader"], capture_output=True, text=True,
                                    timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        if answer.returncode == 0 and answer.stdout.strip():
            name, _, capability = answer.stdout.splitlines()[0].partition(",")
            major, _, minor = capability.strip().partition(".")
            known = major.isdigit() and minor.isdigit()
            return name.strip(), (int(major), int(minor)) if known else None
    return None


def runs_on(capability: tuple[int, int], built_for: list[str]) -> bool:
    """Whether code built for ``built_for`` (torch's arch list: sm_90, compute_90, ...) runs on
    a GPU of ``capability``: machine code (sm_XY) on the same major version with an equal or
    higher minor one; PTX (compute_XY) is compiled on the spot for any GPU at least as new."""
    for arch in built_for:
        kind, _, number = arch.partition("_")
        number = number.rstrip("af")  # sm_90a, sm_100f: variants of the same architecture
        if not number.isdigit():
            continue
        code = (int(number[:-1]), int(number[-1]))
        if (kind == "sm" and code[0] == capability[0] and code[1] <= capability[1]) or \
                (kind == "compute" and code <= capability):
            return True
    return False


def install_advice(capability: tuple[int, int] | None) -> str:
    """The command that installs this torch release built for a CUDA version whose code runs
    on ``capability`` (the oldest such CUDA: it needs the oldest driver). torch lists its own
    CUDA builds from about 2.12 on (``torch.cuda.PYTORCH_RELEASES_CODE_CC``); older releases
    send the learner to PyTorch's selector."""
    releases = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None)
    if not isinstance(releases, dict):
        return f"{SELECTOR} gives the pip command for a CUDA build (add --force-reinstall)"
    host = "aarch64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
    fitting = sorted((tuple(int(part) for part in cuda.split(".")), cuda)
                     for cuda, by_host in releases.items()
                     if capability is None or runs_on(capability, [
                         f"sm_{code}" for code in by_host.get(host, ())]))
    release = torch.__version__.split("+")[0]
    if not fitting:
        return f"no CUDA build of torch {release} runs on this GPU; another release may " \
               f"({SELECTOR})"
    tag = "cu" + fitting[0][1].replace(".", "")
    return (f'pip install "torch=={release}+{tag}" --index-url {INDEX}/{tag} installs torch '
            f"{release} built for CUDA {fitting[0][1]}, which runs on this GPU")
