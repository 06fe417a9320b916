"""a08 under real torchrun on CPU with gloo: any number of processes, one or two 'machines'."""

import inspect
import platform
import re
import subprocess
import sys

from common import NeuralNetwork

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import a08_ddp_torchrun as a08
from conftest import (
    ON_WINDOWS,
    ROOT,
    clean_env,
    free_ports,
    machine_command,
    needs_torchrun,
    run_concurrently,
    run_main,
    shim_env,
    torchrun_command,
)

LOSS = re.compile(r"^\[CPU(\d+)\] Epoch: (\d{3})/003 \| Batchsize 002 \| "
                  r"Train/Val Loss: (\d\.\d\d)$")
TRAIN_ACC = re.compile(r"^\[CPU(\d+)\] Training accuracy (\S+)$")
TEST_ACC = re.compile(r"^\[CPU(\d+)\] Test accuracy (\S+)$")
GLOBAL = re.compile(r"^Global (training|test) accuracy over all (\d+) processes: "
                    r"(\S+) \((\d+) of (\d+) examples\)$")
SAME = re.compile(r"^Parameters identical in all (\d+) processes: (True|False) "
                  r"\(what averaging the gradients promises\)$")
HEADER = re.compile(r"^(|=== 9\.3 .*|PyTorch version: .*|CUDA available: .*|"
                    r"Number of GPUs available: .*|Processes: .*|Note: .*|"
                    r"Training time: [\d.]+ s for \d+ samples, \d+ samples/s over all "
                    r"processes \(start-up excluded\))$")


def parse(stdout: str) -> dict:
    """Every stdout line must be one whole line of a known kind; spliced lines fail here."""
    out = {"loss": {}, "train_acc": {}, "test_acc": {}, "global": [], "same": [], "header": []}
    for line in stdout.splitlines():
        if m := LOSS.match(line):
            out["loss"].setdefault(int(m[1]), []).append((int(m[2]), float(m[3])))
        elif m := TRAIN_ACC.match(line):
            out["train_acc"].setdefault(int(m[1]), []).append(m[2])
        elif m := TEST_ACC.match(line):
            out["test_acc"].setdefault(int(m[1]), []).append(m[2])
        elif m := GLOBAL.match(line):
            out["global"].append(m.groups())
        elif m := SAME.match(line):
            out["same"].append(m.groups())
        elif HEADER.match(line):
            out["header"].append(line)
        else:
            pytest.fail(f"unexpected or spliced line: {line!r}")
    return out


def expected_samples(nproc: int) -> int:
    return 5 if -(-5 // nproc) >= 2 else 2 * nproc


NPROCS = [2]  # side by side in the default run; 1, 3, 5 and 8 processes with the stress tests
STRESS_NPROCS = [1, 3, 5, 8]
SPAWN = "--spawn"  # a key ("--spawn", N): python a08_ddp_torchrun.py --spawn N, no torchrun
NO_LIBUV = "torchrun, TCPStore without libuv"  # the simulation's own check: torchrun fails
NO_AVERAGING = "--spawn 2, DDP without gradient averaging"  # the identical-parameters check's
NODES = "--nnodes=2"  # keys (NODES, 0) and (NODES, 1): two torchruns as two machines, one port
TWO_MACHINES = [(NODES, 0), (NODES, 1)]
DEFAULT_RUNS = [(SPAWN, 2)] if ON_WINDOWS else [*NPROCS, (SPAWN, 2), *TWO_MACHINES]
# the runs that also keep their final weights (--snapshot), for the equivalence test below
SNAPSHOT = "final.pth"
WITH_SNAPSHOT = {(SPAWN, 2): 2, **({} if ON_WINDOWS else {3: 3})}  # key -> processes


def launch_command(key, port: int) -> list[str]:
    if key == NO_LIBUV:
        return torchrun_command(2, port=port)
    snapshot = ("--snapshot", SNAPSHOT) if key in WITH_SNAPSHOT else ()
    if key == NO_AVERAGING:
        return [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), SPAWN, "2"]
    if key in TWO_MACHINES:
        return machine_command(key[1], 2, port)
    if isinstance(key, tuple):
        return [sys.executable, str(ROOT / "a08_ddp_torchrun.py"), SPAWN, str(key[1]), *snapshot]
    return torchrun_command(key, *snapshot, port=port)


def launch_env(key) -> dict:
    """--spawn 2 and the torchrun check run on a simulated torch whose TCPStore refuses libuv,
    as torch's Windows wheels do: --spawn needs no TCPStore, torchrun cannot start. The
    no-averaging run's DDP never averages gradients (tests/shims/no_grad_averaging)."""
    if key == NO_AVERAGING:
        return shim_env("no_grad_averaging")
    return shim_env("no_libuv") if key in ((SPAWN, 2), NO_LIBUV) else clean_env()


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory) -> dict:
    """``ddp_runs(key)``: a08 under torchrun with N processes (key N), with --spawn N (key
    ("--spawn", N)), or one of two machines (TWO_MACHINES). The default runs are all launched
    at once, on their own free ports, the first time one is asked for: this also shows that
    runs do not disturb one another."""
    cache: dict = {}

    def get(key) -> subprocess.CompletedProcess:
        if key not in cache:
            batch = DEFAULT_RUNS if key in DEFAULT_RUNS else [key]
            ports = dict(zip(batch, free_ports(len(batch)), strict=True))
            if TWO_MACHINES[1] in ports:  # the second machine meets the first at its port
                ports[TWO_MACHINES[1]] = ports[TWO_MACHINES[0]]
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


@needs_torchrun
def test_a08_two_machines_use_global_ranks(ddp_runs):
    """Two torchrun launches with --nnodes=2 sharing a rendezvous on localhost, 2 processes
    each: global ranks 0 to 3 must each appear exactly once (LOCAL_RANK repeats 0, 1)."""
    results = [ddp_runs(key) for key in TWO_MACHINES]
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    outputs = [(result.stdout, result.stderr) for result in results]
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
    """Two at a time (this machine has idle cores while a run starts)."""
    failures, losses = [], []
    for pair in range(25):
        results = run_concurrently({attempt: torchrun_command(2) for attempt in (2 * pair,
                                                                                 2 * pair + 1)},
                                   cwd_of=lambda attempt: tmp_path)
        for attempt, result in results.items():
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
               if line.startswith(("Training time: ", "Global ", "Parameters identical "))]
    own = [i for i, line in enumerate(lines) if line.startswith(("[CPU", "[GPU"))]
    assert len(summary) == 4
    assert min(summary) > max(own)
    assert lines[summary[0]].startswith("Training time: ")
    assert lines[-1].startswith("Parameters identical ")


# What section 9.3 teaches, beyond the printed lines: DDP keeps one model on every process by
# averaging their gradients, and DistributedSampler gives each process its own examples.

def test_a08_parameters_identical_on_every_process(ddp_run):
    nproc, result = ddp_run
    assert parse(result.stdout)["same"] == [(str(nproc), "True")]


def test_a08_plain_python_parameters_identical(default_run):
    assert parse(default_run("a08_ddp_torchrun.py").stdout)["same"] == [("1", "True")]


@pytest.mark.stress
def test_a08_says_so_when_gradients_are_not_averaged(ddp_runs):
    """The same check on a DDP that trains each copy on its own: it must see the difference,
    while every accuracy line still says 1.0 (which is why the check exists)."""
    result = ddp_runs(NO_AVERAGING)
    assert result.returncode == 0, result.stderr[-3000:]
    parsed = parse(result.stdout)
    assert parsed["same"] == [("2", "False")]
    assert parsed["train_acc"] == {0: ["1.0"], 1: ["1.0"]}


def a08_train_loaders(nproc: int, monkeypatch) -> list:
    """a08's own training loader as each of ``nproc`` processes builds it (its
    DistributedSampler asks the process group for the rank and the number of processes)."""
    args, _, _ = a08.extras.parse_a08_flags(a08.__doc__, [])
    loaders = []
    for rank in range(nproc):
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: nproc)
        monkeypatch.setattr(dist, "get_rank", lambda group=None, rank=rank: rank)
        loaders.append(a08.prepare_dataset(args, nproc, torch.device("cpu"))[0])
    return loaders


def indices_per_rank(loaders: list, epoch: int) -> list[list[int]]:
    for loader in loaders:
        loader.sampler.set_epoch(epoch)
    return [list(loader.sampler) for loader in loaders]


@pytest.mark.parametrize("nproc", [2, 3, 5])
def test_distributed_sampler_splits_the_data(nproc, monkeypatch):
    """Within an epoch the processes' slices are disjoint and together cover the data set,
    padded to a multiple of the number of processes by repeating its first examples; the
    loader gives each process exactly its slice's examples; set_epoch reshuffles, and the same
    seed gives the same order again."""
    loaders = a08_train_loaders(nproc, monkeypatch)
    dataset = loaders[0].dataset
    n = len(dataset)
    slices = indices_per_rank(loaders, epoch=0)
    per_rank = -(-n // nproc)
    assert [len(s) for s in slices] == [per_rank] * nproc
    # DistributedSampler deals a shuffled, padded list of indices round-robin
    dealt = [slices[i % nproc][i // nproc] for i in range(per_rank * nproc)]
    assert sorted(dealt[:n]) == list(range(n))
    assert dealt[n:] == dealt[:per_rank * nproc - n]
    for loader, indices in zip(loaders, slices, strict=True):
        seen = [(features, labels) for features, labels in loader]
        full = len(seen) * loader.batch_size  # drop_last: a partial batch is left out
        assert torch.equal(torch.cat([f for f, _ in seen]), dataset.features[indices[:full]])
        assert torch.equal(torch.cat([lab for _, lab in seen]), dataset.labels[indices[:full]])
    assert indices_per_rank(loaders, epoch=1) != slices
    assert indices_per_rank(a08_train_loaders(nproc, monkeypatch), epoch=0) == slices


def sgd_on_joined_batches(loaders: list, epochs: int, ranks: int | None = None) -> dict:
    """Section 7's model trained in one process with plain SGD, each step on one batch made of
    the batches the first ``ranks`` processes (all by default) train on at that step."""
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(epochs):
        for loader in loaders:
            loader.sampler.set_epoch(epoch)
        for step in zip(*loaders[:ranks], strict=True):
            features = torch.cat([features for features, _ in step])
            labels = torch.cat([labels for _, labels in step])
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


@pytest.mark.parametrize("key", [pytest.param(key, marks=[pytest.mark.stress, needs_torchrun])
                                 if key == 3 else key for key in WITH_SNAPSHOT], ids=str)
def test_ddp_equals_one_process_on_the_joined_batches(key, ddp_runs, monkeypatch):
    """Section 9.3's gradient averaging as an equation: N processes with batches of 2 end with
    the weights that one process reaches with plain SGD on batches of 2N made of exactly the
    examples the N processes saw at each step. (Each process's loss is a mean over its batch;
    DDP averages the N gradients: that is the gradient of the mean over the joined batch.)"""
    nproc = WITH_SNAPSHOT[key]
    result = ddp_runs(key)
    assert result.returncode == 0, result.stderr[-3000:]
    ddp_weights = torch.load(result.cwd / SNAPSHOT, weights_only=True)["model"]
    loaders = a08_train_loaders(nproc, monkeypatch)
    joined = sgd_on_joined_batches(loaders, epochs=3)
    alone = sgd_on_joined_batches(loaders, epochs=3, ranks=1)  # rank 0's batches only
    for name, weight in ddp_weights.items():
        assert torch.allclose(weight, joined[name], rtol=0, atol=1e-6), name
    assert max((ddp_weights[name] - alone[name]).abs().max() for name in alone) > 1e-3


def test_a08_pins_memory_only_for_gpu_processes(monkeypatch):
    """The text's pin_memory=True where it helps, a process on a GPU; a CPU process beside
    GPUs (--device cpu, or more processes than GPUs) would start CUDA on GPU 0 to pin."""
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    args = a08.extras.parse_a08_flags(a08.__doc__, [])[0]
    for device, pinned in (("cpu", False), ("cuda", True)):
        train_loader = a08.prepare_dataset(args, 1, torch.device(device))[0]
        assert train_loader.pin_memory is pinned, device


@pytest.mark.parametrize(("system", "device", "backend", "device_id"), [
    ("Linux", torch.device("cuda", 0), "nccl", torch.device("cuda", 0)),
    ("Linux", torch.device("cpu"), "gloo", None),
    ("Windows", torch.device("cpu"), "gloo", None),  # a08 never trains on CUDA there
])
def test_a08_process_group_backend_and_device(system, device, backend, device_id, monkeypatch):
    """Simulated: NCCL between GPUs, told its GPU (else barrier() warns on torch 2.8 to 2.14);
    gloo on CPUs and on Windows."""
    calls = []
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(a08, "init_process_group", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setenv("USE_LIBUV", "1")  # restored after the test; Windows sets it to 0
    args, launch, _ = a08.extras.parse_a08_flags(a08.__doc__, ["--device", "cpu"])
    a08.ddp_setup(0, 1, device, launch, args.timeout)
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:
        device_id = None  # torch 2.2 (an Intel Mac's) has no such parameter: not passed
    assert [(call["backend"], call.get("device_id")) for call in calls] == [(backend, device_id)]
