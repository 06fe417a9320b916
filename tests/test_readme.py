"""The learner's pages, README.md and TROUBLESHOOTING.md: every command in them run by a test
as written (or listed here with the reason it cannot run on this machine), every message they
quote from the project still printed by it, every link and anchor whole."""

import re

import pytest

from conftest import ROOT, fake_commands

# what can be run here, in the environment the Quick start made, is run by
# test_quick_start.py::test_quick_start_then_every_readme_command_in_a_fresh_clone (stress)
NOT_RUN_HERE = {
    "pip install torch --index-url https://download.pytorch.org/whl/cpu":
        "that index cannot be reached here; the GitHub workflow's Linux job runs it",
    "pip install torch --index-url https://download.pytorch.org/whl/cu130":
        "for an NVIDIA GPU on Windows or ARM Linux; that index cannot be reached here",
    "pip install torch --index-url https://download.pytorch.org/whl/cu126":
        "for a GTX 10xx, P100 or V100 (Linux, Windows), or a driver that predates CUDA 13; that "
        "index cannot be reached here",
    "uv venv --seed --python 3.12":
        "the uv path: test_the_uv_path_keeps_the_torch_it_installed runs it with this Python",
    "uv pip install --no-config torch --torch-backend=auto":
        "uv asks PyTorch's indexes, which cannot be reached here: the uv path's test installs "
        "this machine's torch wheel in its place",
    'uv pip install ".[test]"': "the uv path: test_the_uv_path_keeps_the_torch_it_installed",
    "uv run python -m common.walkthrough":
        "the uv path: test_the_uv_path_keeps_the_torch_it_installed",
    "brew install python@3.12": "Homebrew, on a Mac",
    "python3.12 -m venv .venv": "after Homebrew's Python 3.12, on a Mac",
    "torchrun --nproc_per_node=gpu a08_ddp_torchrun.py": "needs CUDA: bash .ci/gpu-check",
    "torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr=10.0.0.1 "
    "--master_port=29500 a08_ddp_torchrun.py":
        "needs two machines; test_a08_two_machines_use_global_ranks runs it on localhost",
    "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=10.0.0.1 "
    "--master_port=29500 a08_ddp_torchrun.py":
        "needs two machines; test_a08_two_machines_use_global_ranks runs it on localhost",
    "python -m pytest": "the README's test command: .ci/run runs it in a fresh clone (in the "
                        "fresh-clone test it would run the whole suite inside itself)",
}
PROMPTS = ("python ", "torchrun ", "pip ", "source ", "git diff ")


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def troubleshooting() -> str:
    return (ROOT / "TROUBLESHOOTING.md").read_text(encoding="utf-8")


def readme_commands() -> list[str]:
    """Every command a learner copies: the lines of the bash blocks of README.md and
    TROUBLESHOOTING.md (the SLURM batch script is a file, not commands), and the README's inline
    code that starts like a command; comments dropped, white space folded."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme() + troubleshooting(), flags=re.S):
        if not block.startswith("#!/bin/bash"):
            commands += [line for line in block.splitlines() if not line.startswith("#")]
    prose = re.sub(r"```.*?```", "", readme(), flags=re.S)
    commands += [span for span in re.findall(r"`([^`]+)`", prose) if span.startswith(PROMPTS)]
    return list(dict.fromkeys(" ".join(c.split()) for c in commands if c.strip()))


def commands_run_here() -> list[str]:
    return [command for command in readme_commands() if command not in NOT_RUN_HERE]


def test_every_command_not_run_here_is_in_the_readme():
    """The list above names only commands that exist, so it cannot hide one."""
    assert set(NOT_RUN_HERE) <= set(readme_commands())
    assert len(commands_run_here()) >= 15, commands_run_here()


def test_every_command_pastes_into_powershell_and_cmd():
    """cmd takes no comment after a command (pip would get `#` and its words as requirements,
    a script its flags): a comment stands on its own line (the SLURM script is a file)."""
    blocks = re.findall(r"```(?:bash|powershell)\n(.*?)```", readme() + troubleshooting(), re.S)
    assert [line for block in blocks if not block.startswith("#!/bin/bash")
            for line in block.splitlines() if re.search(r"\S\s+#", line)] == []


def test_the_powershell_lines_run_as_pasted_without_a_prompt():
    """Windows PowerShell 5.1's Set-ExecutionPolicy asks Y/N (its -Confirm prompt, on by default
    for a policy change there): pasted with the lines after it, the prompt takes the next line,
    `.venv\\Scripts\\Activate.ps1`, as its answer. -Force asks nothing."""
    blocks = re.findall(r"```powershell\n(.*?)```", readme() + troubleshooting(), re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    asking = [line for line in lines if line.startswith("Set-ExecutionPolicy") and
              "-Force" not in line.split()]
    assert any(line.startswith("Set-ExecutionPolicy") for line in lines) and asking == []


def headings(text: str) -> list[str]:
    return re.findall(r"^#{2,3} (.+)$", text, re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation gone, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


PAGES = [ROOT / "README.md", ROOT / "TROUBLESHOOTING.md", ROOT / "tests" / "README.md",
         ROOT / "tests" / "benchmarks" / "README.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (fragment and linked.suffix == ".md" and fragment not in [
                anchor(h) for h in headings(linked.read_text(encoding="utf-8"))]):
            broken.append(target)
    assert broken == []


def project_source() -> str:
    return "".join(path.read_text(encoding="utf-8") for path in [*ROOT.glob("a0*.py"),
                                                 *(ROOT / "common").glob("*.py")])


def test_every_error_line_troubleshooting_quotes_is_still_printed():
    """An entry headed by one of the project's own `error: ...` lines: each of its words
    between placeholders (PATH, N, s.pt, ...) stands in the code that prints it."""
    quoted = [re.match(r"`error: ([^`]+)`", h) for h in headings(troubleshooting())
              if "externally-managed-environment" not in h]  # pip's own error line
    fragments = [part.strip(" :") for m in quoted if m
                 for part in re.split(r"\bPATH\b|\bN\b|\bs\.pt\b|\.\.\.", m[1])]
    assert len(fragments) >= 3
    assert [f for f in fragments if len(f) > 3 and f not in project_source()] == []


def lesson_mistakes() -> dict:
    """The mistakes learners make in the lesson's own lines, as they write them (issue trackers):
    each a call that raises torch's error."""
    import torch
    import torch.nn.functional as F
    w1 = torch.tensor([2.2], requires_grad=True)

    def update_outside_no_grad():  # section 4's update, written without torch.no_grad()
        w1.sub_(0.1 * torch.ones(1))

    def loss_under_no_grad():
        with torch.no_grad():
            loss = (w1 * 1.1).sum()
        loss.backward()

    def mps_file_here(folder):
        torch.save({"w": torch.ones(3)}, folder / "mac.pth")
        torch.load(folder / "mac.pth", map_location="mps", weights_only=True)
    logits = torch.randn(5, 2)
    return {"labels of shape (N, 1)": lambda folder: F.cross_entropy(
                logits, torch.tensor([[0], [0], [0], [1], [1]])),
            "one-hot labels": lambda folder: F.cross_entropy(
                logits, F.one_hot(torch.tensor([0, 0, 0, 1, 1]))),
            "backward of several values": lambda folder: (w1 * torch.ones(2)).backward(),
            "an update outside no_grad": lambda folder: update_outside_no_grad(),
            "the loss under no_grad": lambda folder: loss_under_no_grad(),
            "a Mac's map_location elsewhere": mps_file_here}


@pytest.mark.parametrize("mistake", list(lesson_mistakes()))
def test_a_mistake_in_the_lessons_lines_is_found_by_its_message(mistake, tmp_path):
    """torch's words for it, today's, head an entry (where it was said "ran here")."""
    import torch
    if mistake.startswith("a Mac's") and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS: the file loads")
    with pytest.raises(Exception) as error:  # torch 2.4 and 2.5 wrap the MPS one in
        lesson_mistakes()[mistake](tmp_path)   # "Weights only load failed" (UnpicklingError)
    said = [line.split("WeightsUnpickler error: ")[-1].strip()
            for line in str(error.value).splitlines() if line.strip()]
    assert [line for line in said for heading in headings(troubleshooting()) if line in heading], \
        said


def test_every_entry_a_script_names_exists():
    named = re.findall(r'see TROUBLESHOOTING\.md: "([^"]+)"', project_source())
    assert named
    assert [name for name in named if not any(name in h for h in headings(
        troubleshooting()))] == []


def sbatch_script() -> str:
    """TROUBLESHOOTING.md's bash block that is a SLURM batch script."""
    blocks = re.findall(r"```bash\n(.*?)```", troubleshooting(), flags=re.S)
    scripts = [block for block in blocks if block.startswith("#!/bin/bash\n#SBATCH")]
    assert len(scripts) == 1, "TROUBLESHOOTING.md should hold exactly one SLURM batch script"
    return scripts[0]


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

    script = sbatch_script()
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
