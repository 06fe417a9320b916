"""TROUBLESHOOTING.md's SLURM batch script, run as written under a real SLURM started on this
machine: a controller and one compute node on localhost, CPU only. Skips, with the reason, where
SLURM is not installed (Debian: apt-get install slurmctld slurmd slurm-client; .ci/run does)."""

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, clean_env, free_port
from test_readme import sbatch_script

SLURM = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "srun")
pytestmark = [
    pytest.mark.stress,
    pytest.mark.skipif(platform.system() != "Linux" or any(shutil.which(p) is None
                                                          for p in SLURM),
                       reason="needs SLURM on Linux: apt-get install slurmctld slurmd "
                              "slurm-client"),
    pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0,
                       reason="a SLURM of its own runs its daemons as root"),
]


def write_config(folder: Path, node: str) -> Path:
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    settings = (
        f"ClusterName=companion SlurmctldHost={node}(127.0.0.1) SlurmUser=root SlurmdUser=root "
        f"AuthType=auth/none CredType=cred/none StateSaveLocation={folder}/state "
        f"SlurmdSpoolDir={folder}/spool SlurmctldPidFile={folder}/slurmctld.pid "
        f"SlurmdPidFile={folder}/slurmd.pid SlurmctldLogFile={folder}/slurmctld.log "
        f"SlurmdLogFile={folder}/slurmd.log SlurmctldPort={free_port()} "
        f"SlurmdPort={free_port()} ProctrackType=proctrack/linuxproc TaskPlugin=task/none "
        f"SchedulerType=sched/builtin SelectType=select/cons_tres SelectTypeParameters=CR_Core "
        f"ReturnToService=2 MpiDefault=none JobAcctGatherType=jobacct_gather/none "
        f"AccountingStorageType=accounting_storage/none").split()
    config = folder / "slurm.conf"
    config.write_text("\n".join([
        *settings, f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP"]) + "\n")
    return config


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A SLURM of this test's own (its own config, ports and state folder); yields the
    environment to submit with. The daemons it starts, it stops, by their process IDs."""
    folder = tmp_path_factory.mktemp("slurm")
    node = socket.gethostname().split(".")[0]
    env = clean_env() | {"SLURM_CONF": str(write_config(folder, node))}
    # the job's torchrun and python: this test's own environment
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    with open(folder / "daemons.log", "w") as log:
        daemons = [subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
                   for command in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", node])]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                   text=True).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            log = (folder / "daemons.log").read_text(encoding="utf-8")
            pytest.fail(f"SLURM did not come up: {log[-2000:]}")
        yield env
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def job_field(env: dict, job: str, field: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                         text=True).stdout
    match = re.search(rf"\b{field}=(\S+)", out)
    return match[1] if match else ""


def wait_for_end(env: dict, job: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_field(env, job, "JobState")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job} still {job_field(env, job, 'JobState')} after {timeout} s")


def submit(env: dict, folder: Path, *a08_flags: str) -> str:
    """sbatch the README's script from ``folder``, on this one CPU-only machine: the command
    line overrides the script's --nodes=2, --gpus-per-node and --cpus-per-task."""
    (folder / "a08.sbatch").write_text(sbatch_script())
    (folder / "a08_ddp_torchrun.py").symlink_to(ROOT / "a08_ddp_torchrun.py")
    result = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0",
                             f"--cpus-per-task={os.cpu_count() or 1}", "a08.sbatch", *a08_flags],
                            cwd=folder, env=env, capture_output=True, text=True, check=True)
    return result.stdout.strip().split(";")[0]


def test_readme_sbatch_script_completes(slurm, tmp_path):
    job = submit(slurm, tmp_path)
    ended = wait_for_end(slurm, job)
    out = (tmp_path / f"a08-{job}.out").read_text(encoding="utf-8")
    assert ended == "COMPLETED", out
    assert job_field(slurm, job, "ExitCode") == "0:0"
    assert sorted(re.findall(r"^\[CPU(\d)\] Test accuracy 1\.0$", out, re.M)) == ["0", "1"]
    assert "Global training accuracy over all 2 processes: 1.0 (5 of 5 examples)" in out
    assert (tmp_path / f"a08-{job}.pt").exists(), "no snapshot for a requeued job to resume"
