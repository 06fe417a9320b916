"""The benchmark tools still run and report (tiny workloads; the figures themselves are not
checked: benchmarks are reports, not timed tests). Slow-ish, so with the stress tests."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT, clean_env, free_port, needs_torchrun

pytestmark = [pytest.mark.stress, needs_torchrun]
TINY = ("--num-samples", "2048", "--batch-size", "64", "--epochs", "1")


def test_runner_reports_ddp_rows_and_a_verdict(tmp_path):
    markdown = tmp_path / "report.md"
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/benchmarks/run.py"), "--only", "ddp",
         "--batch-sizes", "64", "--nprocs", "2", "--repeats", "1", "--num-samples", "512",
         "--epochs", "1", "--markdown", str(markdown)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=clean_env())
    assert out.returncode == 0, out.stderr
    figures = r"\d+ \| \d+\.\d\dx \| [\d.]+-[\d.]+"  # samples/s, median ratio, range
    for run in ("plain, 1 thread", "2 plain processes side by side", "DDP, N=2"):
        assert re.search(rf"\| cpu \| 64 \| {run} \| {figures} \|", out.stdout), run
    assert "On the CPU, DDP with 2 processes" in markdown.read_text()


def test_step_profile_times_every_phase_on_every_rank(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={free_port()}",
         str(ROOT / "tests/benchmarks/step_profile.py"), *TINY],
        cwd=tmp_path, capture_output=True, text=True, timeout=180, env=clean_env())
    assert out.returncode == 0, out.stderr
    phases = r"fetch [\d.]+, forward [\d.]+, backward [\d.]+, sync wait [\d.]+, " \
             r"optimizer [\d.]+, step [\d.]+"
    for rank in (0, 1):
        assert re.search(rf"DDP rank {rank} of 2, batch 64, \d+ steps, mean ms: {phases}",
                         out.stdout)
    assert "gradients ready, gap between the processes: mean" in out.stdout
    assert "all-reduce, from the last process ready to the first done: mean" in out.stdout
