"""What holds for every script: --help, exit 0, same output twice, no litter in the repository."""

import re
import sys

import pytest
from conftest import LITTER_AT_START, ROOT, repo_litter, run_concurrently

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


@pytest.fixture(scope="module")
def help_runs(workdir):
    return run_concurrently({s: [sys.executable, str(ROOT / s), "--help"] for s in SCRIPTS},
                            cwd_of=lambda _: workdir)


@pytest.fixture(scope="module")
def second_runs(tmp_path_factory):
    return run_concurrently({s: [sys.executable, str(ROOT / s)] for s in SCRIPTS},
                            cwd_of=lambda s: tmp_path_factory.mktemp(s[:3]))


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_names_the_section(script, help_runs):
    result = help_runs[script]
    assert result.returncode == 0
    assert SCRIPTS[script] in result.stdout
    assert "PyTorch in One Hour" in result.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_runs_twice_with_identical_output(script, default_run, second_runs):
    first = default_run(script)
    assert first.returncode == 0, first.stderr
    second = second_runs[script]
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert re.search(r"=== \d", first.stdout), "no numbered section heading"


def test_no_litter_in_the_repository(default_run):
    for script in SCRIPTS:
        default_run(script)
    assert repo_litter() == LITTER_AT_START
