"""a08 under real torchrun on CPU with gloo: any number of processes, one or two 'machines'."""

import re
import subprocess
import sys

import pytest

from conftest import (
    ON_WINDOWS,
    ROOT,
    clean_env,
    free_port,
    free_ports,
    needs_torchrun,
    run_concurrently,
    run_main,
    shim_env,
    torchrun,
    torchrun_command,
)

LOSS = re.compile(r"^\[CPU(\d+)\] Epoch: (\d{3})/003 \| Batchsize 002 \| "
                  r"Train/Val Loss: (\d\.\d\d)$")
TRAIN_ACC = re.compile(r"^\[CPU(\d+)\] Training accuracy (\S+)$")
TEST_ACC = re.compile(r"^\[CPU(\d+)\] Test accuracy (\S+)$")
GLOBAL = re.compile(r"^Global (training|test) accuracy over all (\d+) processes: "
                    r"(\S+) \((\d+) of (\d+) examples\)$")
HEADER = re.compile(r"^(|=== 9\.3 .*|PyTorch version: .*|CUDA available: .*|"
                    r"Number of GPUs available: .*|Processes: .*|Note: .*|"
                    r"Training time: [\d.]+ s for \d+ samples, \d+ samples/s over all "
                    r"processes \(start-up excluded\))$")


def parse(stdout: str) -> dict:
    """Every stdout line must be one whole line of a known kind; spliced lines fail here."""
    out = {"loss": {}, "train_acc": {}, "test_acc": {}, "global": [], "header": []}
    for line in stdout.splitlines():
        if m := LOSS.match(line):
            out["loss"].setdefault(int(m[1]), []).append((int(m[2]), float(m[3])))
        elif m := TRAIN_ACC.match(line):
            out["train_acc"].setdefault(int(m[1]), []).append(m[2])
        elif m := TEST_ACC.match(line):
            out["test_acc"].setdefault(int(m[1]), []).append(m[2])
        elif m := GLOBAL.match(line):
            out["global"].append(m.groups())
        elif HEADER.match(line):
            out["header"].append(line)
        else:
            pytest.fail(f"unexpected or spliced line: {line!r}")
    return out


def expected_samples(nproc: int) -> int:
    return 5 if -(-5 // nproc) >= 2 else 2 * nproc


NPROCS = [2, 3]  # side by side in the default run; 1, 5 and 8 processes with the stress tests
STRESS_NPROCS = [1, 5, 8]
SPAWN = "--spawn"  # a key ("--spawn", N): python a08_ddp_torchrun.py --spawn N, no torchrun
NO_LIBUV = "torchrun, TCPStore without libuv"  # the simulation's own check: torchrun fails
DEFAULT_RUNS = [(SPAWN, 2)] if ON_WINDOWS else [*NPROCS, (SPAWN, 2)]


def launch_command(key, port: int) -> list[str]:
    if key == NO_LIBUV:
        return torchrun_command(2, port=port)
    if isinstance(key, tuple):
        return [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), SPAWN, str(key[1])]
    return torchrun_command(key, port=port)


def launch_env(key) -> dict:
    """--spawn 2 and the torchrun check run on a simulated torch whose TCPStore refuses libuv,
    as torch's Windows wheels do: --spawn needs no TCPStore, torchrun cannot start."""
    return shim_env("no_libuv") if key in ((SPAWN, 2), NO_LIBUV) else clean_env()


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory) -> dict:
    """``ddp_runs(key)``: a08 under torchrun with N processes (key N), or with --spawn N (key
    ("--spawn", N)). The default runs are all launched at once, on their own free ports, the
    first time one is asked for: this also shows that runs do not disturb one another."""
    cache: dict = {}

    def get(key) -> subprocess.CompletedProcess:
        if key not in cache:
            batch = DEFAULT_RUNS if key in DEFAULT_RUNS else [key]
            ports = dict(zip(batch, free_ports(len(batch)), strict=True))
            cache.update(run_concurrently(
                {k: launch_command(k, ports[k]) for k in batch},
                cwd_of=lambda k: tmp_path_factory.mktemp("ddp"), env_of=launch_env))
        return cache[key]

    return get


def nproc_of(key) -> int:
    return key[1] if isinstance(key, tuple) else key


@pytest.fixture(params=[*(pytest.param(n, marks=needs_torchrun) for n in NPROCS), (SPAWN, 2),
                        *(pytest.param(n, marks=[pytest.mark.stress, needs_torchrun])
                          for n in STRESS_NPROCS),
                        *(pytest.param(k, marks=pytest.mark.stress)
                          for k in [(SPAWN, 1), (SPAWN, 3)])],
                ids=lambda k: f"spawn{k[1]}" if isinstance(k, tuple) else f"N{k}")
def ddp_run(request, ddp_runs):
    return nproc_of(request.param), ddp_runs(request.param)


@pytest.mark.stress
@needs_torchrun
def test_the_no_libuv_simulation_stops_torchrun(ddp_runs):
    """Without this, the --spawn run on the same simulated torch would prove nothing."""
    result = ddp_runs(NO_LIBUV)
    assert result.returncode != 0
    assert "use_libuv was requested but PyTorch was build without libuv support" \
        in result.stderr
    assert "Epoch:" not in result.stdout


def test_a08_exits_cleanly(ddp_run):
    _, result = ddp_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a08_one_loss_line_per_rank_per_batch(ddp_run):
    nproc, result = ddp_run
    losses = parse(result.stdout)["loss"]
    assert sorted(losses) == list(range(nproc))
    # DistributedSampler pads to ceil(n / N) examples a rank, then the loader makes batches of 2
    per_rank = -(-expected_samples(nproc) // nproc) // 2
    for rank, lines in losses.items():
        assert [epoch for epoch, _ in lines] == sorted([1, 2, 3] * per_rank), rank


def test_a08_loss_falls(ddp_run):
    _, result = ddp_run
    losses = parse(result.stdout)["loss"]
    first = [loss for lines in losses.values() for epoch, loss in lines if epoch == 1]
    last = [loss for lines in losses.values() for epoch, loss in lines if epoch == 3]
    assert sum(last) / len(last) < sum(first) / len(first)


def test_a08_every_rank_accuracy_is_1(ddp_run):
    nproc, result = ddp_run
    parsed = parse(result.stdout)
    assert parsed["train_acc"] == {rank: ["1.0"] for rank in range(nproc)}
    assert parsed["test_acc"] == {rank: ["1.0"] for rank in range(nproc)}


def test_a08_global_accuracy_once_on_rank_0(ddp_run):
    nproc, result = ddp_run
    n = expected_samples(nproc)
    assert parse(result.stdout)["global"] == [
        ("training", str(nproc), "1.0", str(n), str(n)),
        ("test", str(nproc), "1.0", "2", "2"),
    ]


def test_a08_rank_0_header(ddp_run):
    nproc, result = ddp_run
    header = parse(result.stdout)["header"]
    import torch
    assert f"PyTorch version: {torch.__version__}" in header
    assert "CUDA available: False" in header
    assert "Number of GPUs available: 0" in header
    assert f"Processes: {nproc}, training on cpu with the gloo backend" in header
    assert result.stdout.count("PyTorch version:") == 1
    assert result.stdout.count("Training time: ") == 1


def test_a08_enlarges_data_only_when_needed(ddp_run):
    nproc, result = ddp_run
    notes = [line for line in parse(result.stdout)["header"] if line.startswith("Note: ")]
    if nproc >= 5:
        assert notes == [f"Note: 5 examples leave some of the {nproc} processes without a full "
                         f"batch of 2; training on {2 * nproc} (the examples plus noisy copies; "
                         f"see --num-samples)."]
    else:
        assert notes == []


def test_a08_enlarges_data_when_one_process_gets_no_full_batch(capsys):
    """The path N >= 5 takes (stress tests), in one process: a batch larger than the data."""
    code, out, err = run_main("a08_ddp_torchrun.py", ["--batch-size", "6", "--epochs", "1"],
                              capsys)
    assert code == 0, err
    assert ("Note: 5 examples leave some of the 1 processes without a full batch of 6; training "
            "on 6 (the examples plus noisy copies; see --num-samples).\n") in out
    assert "[CPU0] Epoch: 001/001 | Batchsize 006 | Train/Val Loss: " in out
    assert "Global training accuracy over all 1 processes: 1.0 (6 of 6 examples)" in out


def test_a08_plain_python_is_one_process(default_run):
    result = default_run("a08_ddp_torchrun.py")
    assert result.returncode == 0, result.stderr
    parsed = parse(result.stdout)
    assert sorted(parsed["loss"]) == [0]
    # the published script's own figures on torch 2.13 CPU (spec, a08)
    assert [loss for _, loss in parsed["loss"][0]] == [0.66, 0.33, 0.10, 0.07, 0.04, 0.01]
    assert parsed["train_acc"] == {0: ["1.0"]}


def test_a08_log_every_thins_the_loss_lines(capsys):
    code, out, err = run_main("a08_ddp_torchrun.py", ["--log-every", "2"], capsys)
    assert code == 0, err
    assert [loss for _, loss in parse(out)["loss"][0]] == [0.66, 0.10, 0.04]


@needs_torchrun
def test_a08_two_machines_use_global_ranks(tmp_path):
    """Two torchrun launches with --nnodes=2 sharing a rendezvous on localhost, 2 processes
    each: global ranks 0 to 3 must each appear exactly once (LOCAL_RANK repeats 0, 1)."""
    port = free_port()
    launches = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}",
             "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
             str(ROOT / "a08_ddp_torchrun.py")],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=clean_env())
        for node in (0, 1)
    ]
    outputs = [launch.communicate(timeout=180) for launch in launches]
    for launch, (_, stderr) in zip(launches, outputs, strict=True):
        assert launch.returncode == 0, stderr[-3000:]
    ranks = []
    for stdout, _ in outputs:
        parsed = parse(stdout)
        ranks += [rank for rank, values in parsed["train_acc"].items() for _ in values]
    assert sorted(ranks) == [0, 1, 2, 3]
    assert "Processes: 4," in outputs[0][0]
    assert "Global training accuracy over all 4 processes: 1.0" in outputs[0][0]
    assert "Global" not in outputs[1][0]


@pytest.mark.stress
@needs_torchrun
def test_a08_losses_repeat_exactly(ddp_runs, default_run):
    """World size 1 twice: under torchrun, and as a plain process."""
    plain = default_run("a08_ddp_torchrun.py")
    assert parse(ddp_runs(1).stdout)["loss"] == parse(plain.stdout)["loss"]


@pytest.mark.stress
@needs_torchrun
def test_a08_fifty_runs_at_n2_all_exit_0(tmp_path):
    failures, losses = [], []
    for attempt in range(50):
        result = torchrun(2, cwd=tmp_path)
        if result.returncode != 0 or "terminate called" in result.stderr:
            failures.append((attempt, result.returncode, result.stderr[-500:]))
        losses.append(parse(result.stdout)["loss"])
    assert failures == []
    assert all(run == losses[0] for run in losses), "losses differ between runs at N=2"


def test_a08_rank_0_summary_comes_after_every_process_lines(ddp_run):
    """Training time and global accuracy close the output: no process's own line after them."""
    _, result = ddp_run
    lines = result.stdout.splitlines()
    summary = [i for i, line in enumerate(lines)
               if line.startswith(("Training time: ", "Global "))]
    own = [i for i, line in enumerate(lines) if line.startswith(("[CPU", "[GPU"))]
    assert len(summary) == 3
    assert min(summary) > max(own)
    assert lines[summary[0]].startswith("Training time: ")
