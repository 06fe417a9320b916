"""The README is for learners: every command in it run by a test as written (or listed here
with the reason it cannot run on this machine), a08 with the text's own lines, and markers that
say where each part of a script comes from. Its length is a figure, not a test."""

import re

import pytest

from conftest import ROOT, fake_commands

# what can be run here, in the environment the Quick start made, is run by
# test_quick_start.py::test_quick_start_then_every_readme_command_in_a_fresh_clone (stress)
NOT_RUN_HERE = {
    "pip install torch --index-url https://download.pytorch.org/whl/cpu":
        "that index cannot be reached here; the GitHub workflow's Linux job runs it",
    "pip install torch --index-url https://download.pytorch.org/whl/cu126":
        "for Windows with an NVIDIA GPU, or a driver that predates CUDA 13; that index cannot be "
        "reached here",
    "pip install torch --index-url https://download.pytorch.org/whl/cu130":
        "for Linux on ARM with an NVIDIA GPU; that index cannot be reached here",
    "python -m torch.distributed.run": "the launcher's name beside an error, not a command: the "
                                       "notebook cell and the walkthrough run it with a08",
    "pip uninstall -y torch": "removes the torch that the commands after it need; the build "
                              "that replaces it comes from an index this machine cannot reach",
    "torchrun --nproc_per_node=gpu a08_ddp_torchrun.py": "needs CUDA: bash .ci/gpu-check",
    "torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=10.0.0.1 "
    "--master_port=29500 a08_ddp_torchrun.py":
        "needs two machines; test_a08_two_machines_use_global_ranks runs it on localhost",
    "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=10.0.0.1 "
    "--master_port=29500 a08_ddp_torchrun.py":
        "needs two machines; test_a08_two_machines_use_global_ranks runs it on localhost",
    "sbatch a08.sbatch": "tests/test_slurm.py submits the README's script to a real SLURM",
    "python a06_save_load.py --load PATH": "PATH is yours; tests/test_checkpoints.py runs it",
    "sudo apt install python3-venv": "changes the system; Debian and Ubuntu only",
    "%pip install -q .": "a notebook's own pip; in a terminal, `pip install .` (run)",
    "python -m pytest": "the README's test command: .ci/run runs it in a fresh clone (in the "
                        "fresh-clone test it would run the whole suite inside itself)",
}
PROMPTS = ("python ", "torchrun ", "pip ", "source ", "diff ", "sbatch ", "sudo ",
           "OMP_NUM_THREADS=", "%pip ")


def readme() -> str:
    return (ROOT / "README.md").read_text()


def readme_commands() -> list[str]:
    """Every command in the README: the lines of its bash blocks (the SLURM batch script is a
    file, not commands), and inline code in the prose and the section table that starts like
    a command; comments dropped, white space folded."""
    text = readme()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        if block.startswith("#!/bin/bash"):
            continue
        commands += [line.split(" #")[0] for line in block.splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = [span.removeprefix("!") for span in re.findall(r"`([^`]+)`", prose)]  # "!": a cell
    commands += [span for span in spans if span.startswith(PROMPTS)]
    return list(dict.fromkeys(" ".join(c.split()) for c in commands if c.strip()))


def commands_run_here() -> list[str]:
    return [command for command in readme_commands() if command not in NOT_RUN_HERE]


def test_every_command_not_run_here_is_in_the_readme():
    """The list above names only commands that exist, so it cannot hide one."""
    assert set(NOT_RUN_HERE) <= set(readme_commands())
    assert len(commands_run_here()) >= 15, commands_run_here()


# What learners ran into, where only a README line can help: (where it is said, from the heading
# or phrase that starts the part of the README, what it says), each with its report.
LEARNER_REPORTS = [
    ("On Windows, in PowerShell", ["[WinError 206]", "LongPathsEnabled -Value 1"]),  # #180237
    ("**macOS.**", ["Intel Macs get torch 2.2.2", "Python 3.10 to 3.12"]),
    ("**Windows.**", ["NCCL_SHM_DISABLE=1"]),  # WSL2's small /dev/shm
    ("## Several machines", ["NCCL_P2P_DISABLE=1", "NCCL_DEBUG=INFO"]),  # consumer GPUs
    ("## When things go wrong", [
        "Cannot convert a MPS Tensor to float64 dtype", ".float()",
        # PyPI's torch for Windows has no CUDA (pytorch/pytorch#122924); an installed torch
        # needs a remedy that replaces it ("Requirement already satisfied")
        "`python a01_tensors.py` names the cause", "`pip uninstall -y torch`, then the `cu126`",
        # torchrun's own lines taken for the failure (meta-llama/llama#497,
        # huggingface/accelerate#2508, pytorch/pytorch#77523, #131691)
        "Setting OMP_NUM_THREADS environment variable",
        "NOTE: Redirects are currently not supported in Windows or MacOs",
        "errno: 97 - Address family not supported", "Repeated until a timeout, they are the error",
        "[WinError 1114]", "Visual C++ Redistributable",  # nagadomi/nunif#701
        "cannot replace it (Access is denied)"]),  # ultralytics/yolov5#12680
    ("## Quick start", ["Python\n3.10 or newer", "a Mac's own `python3` is 3.9",  # openworker#236
                        "brew install python@3.12", "RTX 50xx needs `cu130`",
                        "before `pip install .`"]),
    ("```powershell", ["py -m venv .venv", "python -m venv .venv",  # python/pymanager#223
                       # a stock Windows refuses every .ps1 file until the user allows local ones
                       "Set-ExecutionPolicy -Scope CurrentUser RemoteSigned"]),
    ("**Notebooks", ["`import a05_training_loop`, then `a05_training_loop.main()`"]),  # ex.#369
    # issue 41's fourth reading
    ("**Windows.**", ["PyPI has no torch for Windows on ARM", "`from versions: none`",  # #133804
                      "PyTorch's CPU index has some"]),
    ("**AMD and Intel GPUs**", ["ROCm's Linux builds", "lacks `torch.distributed`",  # TheRock#1179
                                "`--device xpu`"]),  # ROCm/legacy-rocm-build#2354, kokoro#273
    ("**macOS.**", ["as on Linux from Python 3.14"]),  # pytorch/pytorch#169252
    ("## When things go wrong", [
        "`ip6.arpa` name with no worker ever starting", "`--local-addr=127.0.0.1`",  # PR #174513
        "`--shm-size=1g` or `--ipc=host`",  # pytorch/torchtitan#853, NVIDIA/nccl#342
        "CUDA failing to start, as after a laptop's suspend"]),  # pytorch/pytorch#88639
    # issue 46's fifth reading
    ("## Quick start", ["a 64-bit Python: PyTorch has no 32-bit builds",  # pytorch#27815, #50535
                        "`cu126` ends with torch 2.14"]),  # ai-engineering-from-scratch#192
    ("**Windows.**", ["nor for a 32-bit Python (PyTorch has no 32-bit builds)",
                      "[WinError 1455] The paging file is too small",  # yolov5#11418, #59904
                      "let Windows manage the page file", "or `--spawn 1`"]),
    ("## When things go wrong", [
        # NVIDIA/nccl#1838, #2388, pytorch/pytorch#152302: the fix beside the error it fixes
        "(size 0)`, or `Cuda failure 217 'peer access is not supported between these two devices'`",
        "`--shm-size` or `NCCL_P2P_DISABLE=1` do not help; run `NCCL_SHM_DISABLE=1 torchrun ...` "
        "(or `NCCL_CUMEM_HOST_ENABLE=0`)",
        "`undefined symbol: __nvJitLinkComplete_12_4`", "`module unload cuda` or "  # #111469
        "`unset LD_LIBRARY_PATH`",
        "prints three lines and exits without training",  # the book's scripts on a CPU machine
        "`Distributed package doesn't have NCCL built in`"]),
    # issue 51's sixth reading
    ("## When things go wrong", [
        "[WinError 4551]", "turn Smart App Control off",  # pytorch/pytorch#182008, ComfyUI#15117
        "`[WinError 5] Access is denied", "`~orch` folder",  # pytorch-ts#56, pytorch#156413
        "`failed to create process.`",  # pytorch/pytorch#92132, #77737, #108602
        "`python -m torch.distributed.run` runs this one's",
        "cuda capability 12.1"]),  # a DGX Spark's false warning, pytorch/pytorch#172629
    ("## Quick start", ["Linux on ARM with an NVIDIA GPU", "whl/cu130",  # pytorch#168065
                        "NVIDIA Jetson needs NVIDIA's own wheel"]),  # jetson-inference#1932
    ("**Windows.**", ["not `/mnt/c`"]),  # microsoft/WSL#10729
    ("**macOS.**", ["computes `argmax` wrongly"]),  # pytorch/pytorch#112186, #98191
    ("**SLURM.**", ["`GLIBC_2.27' not found`", "a container"]),  # pytorch/pytorch#150724
    ("#!/bin/bash", ["#SBATCH --cpus-per-task=", "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK",
                     "srun bash -c 'python -m torch.distributed.run"]),  # lightning#18650
]


@pytest.mark.parametrize("where, phrases", LEARNER_REPORTS, ids=[w for w, _ in LEARNER_REPORTS])
def test_the_readme_answers_what_learners_ran_into(where, phrases):
    text = readme()
    part = text[text.index(where):]
    part = " ".join(part[:part.find("\n## ", 1) if "\n## " in part[1:] else None].split())
    for phrase in phrases:
        assert " ".join(phrase.split()) in part, phrase


def test_the_quick_start_gets_the_right_torch_before_pip_install():
    text = readme()
    quick = text[text.index("## Quick start"):text.index("## Section by section")]
    blocks = re.findall(r"```(?:bash|powershell)\n(.*?)```", quick, re.S)
    assert blocks[-1].startswith("pip install .\n")  # after the venv blocks and the choice
    lines = [line.split(" #") for line in blocks[-2].splitlines()]
    assert [(command.strip(), comment.strip()) for command, comment in lines] == [
        ("pip install torch --index-url https://download.pytorch.org/whl/cpu",
         "Linux without an NVIDIA GPU"),
        ("pip install torch --index-url https://download.pytorch.org/whl/cu126",
         "Windows with an NVIDIA GPU"),
        ("pip install torch --index-url https://download.pytorch.org/whl/cu130",
         "Linux on ARM with an NVIDIA GPU")]


@fake_commands
def test_the_sbatch_script_gives_each_machine_its_number_from_slurm(tmp_path):
    """torchrun's c10d rendezvous picks the machine that hosts it by matching host names, and
    hangs where the head node's name resolves to another interface (pytorch/pytorch#73656):
    the script's static rendezvous takes each machine's number from SLURM_NODEID instead,
    expanded on that machine. Run here with an `srun` that starts the task as two machines
    would, and a `python` that says what it got and the cores srun would give it
    (tests/test_slurm.py: under a real SLURM)."""
    import os
    import subprocess

    script = next(block for block in re.findall(r"```bash\n(.*?)```", readme(), flags=re.S)
                  if block.startswith("#!/bin/bash\n#SBATCH"))
    assert "rdzv" not in script
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, body in {
        "scontrol": 'printf "node-a\\nnode-b\\n"',
        "srun": 'for n in 0 1; do SLURM_NODEID=$n "$@"; done',
        "python": 'echo "python $* (cores: $SRUN_CPUS_PER_TASK)"',
    }.items():
        (fakes / name).write_text(f"#!/bin/bash\n{body}\n")
        (fakes / name).chmod(0o755)
    env = {"PATH": f"{fakes}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_JOB_ID": "1234", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4",
           "SLURM_CPUS_PER_TASK": "8",
           "HOME": os.environ.get("HOME", "/")}
    result = subprocess.run(["bash", "-c", script, "a08.sbatch", "--timeout", "60"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"python -m torch.distributed.run --nnodes=2 --node_rank={node} --nproc_per_node=4 "
        f"--master_addr=node-a --master_port=21234 a08_ddp_torchrun.py --snapshot a08-1234.pt "
        f"--timeout 60 (cores: 8)"
        for node in (0, 1)]
