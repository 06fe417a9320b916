"""What holds for every script: --help, exit 0, same output twice, no litter in the repository."""

import re

import pytest

from conftest import LITTER_AT_START, repo_litter, run_script

SCRIPTS = {
    "a01_tensors.py": "1.3",
    "a02_autograd.py": "Sections 3 and 4",
    "a03_mlp.py": "Section 5",
    "a04_dataloaders.py": "Section 6",
    "a05_training_loop.py": "Section 7",
    "a06_save_load.py": "Section 8",
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_names_the_section(script, workdir):
    result = run_script(script, "--help", cwd=workdir)
    assert result.returncode == 0
    assert SCRIPTS[script] in result.stdout
    assert "PyTorch in One Hour" in result.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_runs_twice_with_identical_output(script, default_run, tmp_path):
    first = default_run(script)
    assert first.returncode == 0, first.stderr
    second = run_script(script, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert re.search(r"=== \d", first.stdout), "no numbered section heading"


def test_no_litter_in_the_repository(default_run):
    for script in SCRIPTS:
        default_run(script)
    assert repo_litter() == LITTER_AT_START
