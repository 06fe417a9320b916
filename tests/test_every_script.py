"""What holds for every script: --help, exit 0, same output twice, no litter in the repository."""

import re
import subprocess
import sys

import pytest

from conftest import LITTER_AT_START, ROOT, clean_env, repo_litter, run_main, run_script

SCRIPTS = {
    "a01_tensors.py": "1.3",
    "a02_autograd.py": "Sections 3 and 4",
    "a03_mlp.py": "Section 5",
    "a04_dataloaders.py": "Section 6",
    "a05_training_loop.py": "Section 7",
    "a06_save_load.py": "Section 8",
    "a07_gpu_single.py": "Sections 9.1 and 9.2",
    "a08_ddp_torchrun.py": "Section 9.3",
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_names_the_section_and_every_flag_default(script, capsys):
    code, out, _ = run_main(script, ["--help"], capsys)
    assert code == 0
    assert SCRIPTS[script] in out
    assert "PyTorch in One Hour" in out
    flags = [line.split()[0] for line in out.splitlines()
             if line.startswith("  --") and not line.startswith("  --help")]
    for flag in flags:
        block = out[out.index(f"  {flag}"):]
        block = block[:block.find("\n  -", 1)] if "\n  -" in block[1:] else block
        assert "default" in block, f"{flag} does not show its default"


def test_help_as_a_user_runs_it(workdir):
    result = run_script("a08_ddp_torchrun.py", "--help", cwd=workdir)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: a08_ddp_torchrun.py")


def without_timings(out: str) -> str:
    """The output with measured times masked: they are the only figures allowed to vary."""
    return re.sub(r"^Training time: .*$", "Training time: <masked>", out, flags=re.M)


@pytest.mark.parametrize("script", SCRIPTS)
def test_runs_twice_with_identical_output(script, default_run, capsys, monkeypatch):
    """The second run goes where the first left its files (a06 finds model.pth there), and
    runs main() in this process: the command line's code path without a new interpreter."""
    first = default_run(script)
    assert first.returncode == 0, first.stderr
    monkeypatch.chdir(first.cwd)
    code, out, err = run_main(script, [], capsys)
    assert code == 0, err
    assert without_timings(out) == without_timings(first.stdout)
    assert re.search(r"=== \d", first.stdout), "no numbered section heading"


def test_no_litter_in_the_repository(default_run):
    for script in SCRIPTS:
        default_run(script)
    assert repo_litter() == LITTER_AT_START


def test_walkthrough_stops_at_the_first_failure(tmp_path, monkeypatch, capsys):
    from common.extras import walkthrough
    (tmp_path / "first.py").write_text("print('first ran')\n")
    (tmp_path / "broken.py").write_text("raise SystemExit(3)\n")
    marker = tmp_path / "NEVER_RAN"
    (tmp_path / "never.py").write_text(f"open({str(marker)!r}, 'w')\n")
    monkeypatch.setattr(walkthrough, "ROOT", tmp_path)
    monkeypatch.setattr(walkthrough, "STEPS", [("first.py", None, []), ("broken.py", None, []),
                                               ("never.py", None, [])])
    monkeypatch.setattr(sys, "argv", ["walkthrough"])
    assert walkthrough.main() == 1
    err = capsys.readouterr().err
    assert "Walkthrough stopped: broken.py failed (exit status 3)." in err
    assert not marker.exists()


def test_walkthrough_on_windows_runs_a08_with_spawn(monkeypatch):
    """torchrun cannot start on torch's Windows wheels (no libuv): a08 --spawn 2 instead."""
    import importlib
    import platform

    from common.extras import walkthrough
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    try:
        assert importlib.reload(walkthrough).STEPS[-1] == ("a08_ddp_torchrun.py", None,
                                                           ["--spawn", "2"])
    finally:
        monkeypatch.undo()
        importlib.reload(walkthrough)


def test_walkthrough_piped_into_head_ends_quietly(tmp_path):
    """`python -m common.extras.walkthrough | head`: the reader stops early. Before: a traceback
    from the thread passing the script's output on, another from the walkthrough."""
    (tmp_path / "talky.py").write_text("for i in range(30_000):\n    print(i)\n")  # > a pipe
    program = ("import sys\nfrom pathlib import Path\nfrom common.extras import walkthrough\n"
               f"walkthrough.ROOT = Path({str(tmp_path)!r})\n"
               "walkthrough.STEPS = [('talky.py', None, []), ('talky.py', None, [])]\n"
               "sys.exit(walkthrough.main())\n")
    process = subprocess.Popen([sys.executable, "-c", program], cwd=ROOT, env=clean_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.read(100)
    process.stdout.close()  # as `head` does once it has its lines
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr) == (1, b"")
