"""a08 under real torchrun on CPU with gloo: any number of processes, one or two 'machines',
--spawn; and what section 9.3 teaches: DDP averages the gradients, the sampler splits the data."""

import io
import os
import platform
import re
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from answers import lost_peer

import a08_ddp_torchrun as a08
from common import NeuralNetwork, processes, runner
from conftest import (
    ROOT,
    a08_command,
    clean_env,
    copy_of,
    free_port,
    run,
    run_main,
    run_together,
    torchrun_starts,
)

LOSS = re.compile(r"^\[CPU(\d+)\] Epoch: (\d{3})/00\d \| Batchsize 002 \| "
                  r"Train/Val Loss: (\d\.\d\d)$")
ACCURACY = re.compile(r"^\[CPU(\d+)\] (Training|Test) accuracy 1\.0$")
SUMMARY = re.compile(r"^(Global (training|test) accuracy over all \d+ processes: 1\.0 \(\d+ of "
                     r"\d+ examples\)|Parameters identical in all \d+ processes: (True|False) "
                     r"\(what averaging the gradients promises\))$")
HEADER = re.compile(r"^(|=== 9\.3 .*|PyTorch version: .*|CUDA available: False|"
                    r"Number of GPUs available: 0|Note: .*)$")
SPAWN2, SPAWN3, MACHINES, NO_AVERAGING = "spawn2", "spawn3", "machines", "no-averaging"


def parse(stdout: str) -> dict:
    """Every line one whole line of a known kind (spliced lines fail): losses by rank."""
    losses: dict = {}
    for line in stdout.splitlines():
        if m := LOSS.match(line):
            losses.setdefault(int(m[1]), []).append((int(m[2]), float(m[3])))
        else:
            assert ACCURACY.match(line) or SUMMARY.match(line) or HEADER.match(line) or \
                line in processes.LOSSES_NOTE.splitlines(), line
    return losses


def command(key, port: int) -> list[str]:
    if key in (SPAWN3, NO_AVERAGING):
        return a08_command("--spawn", "3" if key == SPAWN3 else "2", "--snapshot", "final.pt")
    if isinstance(key, tuple):  # two torchruns as two machines, meeting at one port
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                f"--node_rank={key[1]}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                f"--master_port={port}", str(ROOT / "a08_ddp_torchrun.py")]
    return a08_command(nproc=key, port=port)


def environment(key) -> dict:
    """The no-averaging run's DDP never averages gradients (its check must see it)."""
    return clean_env(*(["no_grad_averaging"] if key == NO_AVERAGING else []))


@pytest.fixture(scope="module")
def ddp_runs(runs, tmp_path_factory):
    """``ddp_runs(key)``: N=2 and --spawn 2 from the session's ``runs``; the others (stress)
    when first asked for, the two machines together."""
    cache: dict = {}

    def get(key):
        if key in (2, SPAWN2):
            return runs("a08 N=2" if key == 2 else "a08 --spawn 2")
        if key not in cache:
            batch = [(MACHINES, 0), (MACHINES, 1)] if isinstance(key, tuple) else [key]
            port = free_port()
            cache.update(run_together({k: command(k, port if isinstance(k, tuple) else
                                                  free_port()) for k in batch},
                                      lambda k: tmp_path_factory.mktemp("ddp"), environment))
        return cache[key]

    return get


@pytest.mark.parametrize("key", [
    pytest.param(2, marks=torchrun_starts), SPAWN2, pytest.param(SPAWN3, marks=pytest.mark.stress),
    *(pytest.param(n, marks=[pytest.mark.stress, torchrun_starts]) for n in (1, 8))])
def test_a08_runs_every_process_to_the_end(key, ddp_runs):
    nproc = {SPAWN2: 2, SPAWN3: 3}.get(key, key)
    result = ddp_runs(key)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "terminate called" not in result.stderr
    losses = parse(result.stdout)
    samples = 5 if -(-5 // nproc) >= 2 else 2 * nproc  # 5 or more: enlarged
    per_rank = -(-samples // nproc) // 2  # DistributedSampler pads, the loader drops the rest
    assert {rank: [epoch for epoch, _ in lines] for rank, lines in losses.items()} == \
        {rank: sorted([1, 2, 3] * per_rank) for rank in range(nproc)}
    first, last = ([loss for lines in losses.values() for e, loss in lines if e == epoch]
                   for epoch in (1, 3))
    assert sum(last) / len(last) < sum(first) / len(first)
    out = result.stdout
    assert out.count("PyTorch version:") == 1 and "CUDA available: False\n" in out
    for kind in ("Training", "Test"):
        assert sorted(re.findall(rf"^\[CPU(\d)\] {kind} accuracy 1\.0$", out, re.M)) == \
            [str(rank) for rank in range(nproc)]
    summary = out.splitlines()[-3:]
    assert summary == [
        f"Global training accuracy over all {nproc} processes: 1.0 ({samples} of {samples} "
        f"examples)", f"Global test accuracy over all {nproc} processes: 1.0 (2 of 2 examples)",
        f"Parameters identical in all {nproc} processes: True (what averaging the gradients "
        f"promises)"]
    notes = re.findall(r"^Note: .*$", out, re.M)
    assert notes == ([f"Note: 5 examples leave some of the {nproc} processes without a full "
                      f"batch of 2; training on {2 * nproc} (the examples plus noisy "
                      f"copies)."] if nproc >= 5 else [])


@pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true")
def test_a08_gives_each_of_five_processes_a_batch_and_says_so(monkeypatch, capsys):
    """Where the text stops (5 examples, 5 processes: one each, dropped by drop_last), a08's
    prepare_dataset adds noisy copies: every process a batch of 2, and one note."""
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 5)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    for rank in range(5):
        monkeypatch.setattr(dist, "get_rank", lambda group=None, rank=rank: rank)
        train_loader, _ = a08.prepare_dataset()
        assert [labels.shape[0] for _, labels in train_loader] == [2]
    assert capsys.readouterr().out.startswith("Note: 5 examples leave some of the 5 processes")


@torchrun_starts
@pytest.mark.stress
def test_a08_two_machines_use_global_ranks(ddp_runs):
    """Two torchruns with --nnodes=2 on one port: global ranks 0 to 3 (LOCAL_RANK is 0, 1)."""
    first, second = ddp_runs((MACHINES, 0)), ddp_runs((MACHINES, 1))
    assert first.returncode == second.returncode == 0, first.stderr[-2000:] + second.stderr
    ranks = sorted(re.findall(r"^\[CPU(\d)\] Test accuracy", first.stdout + second.stdout, re.M))
    assert ranks == ["0", "1", "2", "3"]
    assert "Global training accuracy over all 4 processes: 1.0" in first.stdout
    assert "Global" not in second.stdout


@pytest.mark.stress
def test_a08_says_so_when_gradients_are_not_averaged(ddp_runs):
    result = ddp_runs(NO_AVERAGING)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Parameters identical in all 2 processes: False" in result.stdout
    assert result.stdout.count("accuracy 1.0") == 4  # which is why the check exists


def train_loaders(nproc: int, monkeypatch) -> list:
    """a08's training loader as each of ``nproc`` processes builds it (seeded as __main__)."""
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    torch.manual_seed(123)
    loaders = []
    for rank in range(nproc):
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: nproc)
        monkeypatch.setattr(dist, "get_rank", lambda group=None, rank=rank: rank)
        loaders.append(a08.prepare_dataset()[0])
    return loaders


def sgd_on_joined_batches(loaders: list, epochs: int, ranks: int | None = None) -> dict:
    """One process, plain SGD, each step on the batches of the first ``ranks`` processes."""
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(epochs):
        for loader in loaders:
            loader.sampler.set_epoch(epoch)
        for step in zip(*loaders[:ranks], strict=True):
            loss = F.cross_entropy(model(torch.cat([f for f, _ in step])),
                                   torch.cat([label for _, label in step]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


@pytest.mark.parametrize("key", [SPAWN2, pytest.param(SPAWN3, marks=pytest.mark.stress)])
def test_ddp_equals_one_process_on_the_joined_batches(key, ddp_runs, monkeypatch):
    """Gradient averaging as an equation: N processes with batches of 2 end with the weights
    one process reaches with plain SGD on the N batches joined (from --snapshot's file)."""
    nproc = 3 if key == SPAWN3 else 2
    result = ddp_runs(key)
    assert result.returncode == 0, result.stderr[-3000:]
    ddp = torch.load(result.cwd / "final.pt", weights_only=True)["model"]
    loaders = train_loaders(nproc, monkeypatch)
    joined = sgd_on_joined_batches(loaders, epochs=3)
    alone = sgd_on_joined_batches(loaders, epochs=3, ranks=1)
    for name, weight in ddp.items():
        assert torch.allclose(weight, joined[name], rtol=0, atol=1e-6), name
    assert max((ddp[name] - alone[name]).abs().max() for name in alone) > 1e-3


def test_a08_pins_memory_only_for_gpu_processes(monkeypatch):
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    for backend, pinned in (("gloo", False), ("nccl", True)):
        monkeypatch.setattr(dist, "get_backend", lambda group=None, backend=backend: backend)
        assert a08.prepare_dataset()[0].pin_memory is pinned


@pytest.mark.parametrize(("system", "gpus", "device", "local", "backend", "gpu", "libuv"), [
    ("Linux", 2, "auto", "1", "nccl", 1, "1"),  # LOCAL_RANK's GPU, not RANK's (3)
    ("Linux", 2, "cpu", "1", "gloo", None, "1"),
    ("Linux", 1, "auto", "1", "gloo", None, "1"),  # 2 processes here, 1 GPU
    ("Linux", 0, "auto", "0", "gloo", None, "1"),
    ("Windows", 2, "auto", "1", "gloo", None, "0"),  # a08 never trains on CUDA there
])
def test_a08_process_group_backend(system, gpus, device, local, backend, gpu, libuv,
                                   monkeypatch):
    calls, chosen = [], []
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(a08, "init_process_group", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda: calls[-1]["backend"])
    for name, value in {"USE_LIBUV": "1", "RANK": "3", "LOCAL_RANK": local,
                        "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(name, value)
    a08.ddp_setup(3, 4, timeout=7, device=device)
    assert [(call["backend"], call["rank"], call["world_size"]) for call in calls] == \
        [(backend, 3, 4)]
    assert calls[0]["timeout"].total_seconds() == 7
    assert chosen == ([gpu] if gpu is not None else [])
    assert os.environ["USE_LIBUV"] == libuv


@torchrun_starts
@pytest.mark.stress
def test_the_walkthroughs_torchrun_starts_where_the_hostname_is_an_ip6_arpa_name(tmp_path):
    """A Mac whose socket.getfqdn() answers an ip6.arpa name: torchrun repeated 'The IPv6
    network addresses of (1.0.0...ip6.arpa, port) cannot be retrieved' and started no worker
    (pytorch/pytorch PR #174513); the walkthrough hung at its last step."""
    from common import walkthrough
    launcher, step = walkthrough.STEPS[-1]
    command = [sys.executable, "-m", "torch.distributed.run", *launcher.split()[1:],
               str(ROOT / step)]
    result = run(command, tmp_path, clean_env("ip6_arpa_fqdn"), timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Parameters identical in all 2 processes: True" in result.stdout


@torchrun_starts
@pytest.mark.stress
def test_a08_trains_under_the_deprecated_launcher(tmp_path):
    """`python -m torch.distributed.launch` (old tutorials, Colab notebooks) passes
    --local-rank=N to the script: each worker printed a08's usage and exited 2 (hkchengrex/XMem#18,
    microsoft/LoRA#79); the same number is in LOCAL_RANK, which a08 reads."""
    command = [sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}",
               str(ROOT / "a08_ddp_torchrun.py")]
    result = run(command, tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(parse(result.stdout)) == [0, 1]
    assert "Parameters identical in all 2 processes: True" in result.stdout


ENTRY = '(see TROUBLESHOOTING.md: "error: process N")'
LOST_PEER = {  # each OS's one line, as answers.lost_peer gives gloo's words there
    "Linux": "error: process {}: Connection closed by peer [127.0.0.1]:29500 " + ENTRY,
    "Windows": "error: process {}: another process stopped answering, and this one gave up "
               "after waiting 120 s for it (--timeout; gloo: Timed out waiting 120000ms for recv "
               "operation to complete) " + ENTRY}
LOST_PEER["Darwin"] = LOST_PEER["Windows"]


@pytest.mark.parametrize("system", ["Linux", "Windows", "Darwin"])
def test_a_lost_peer_ends_a08_in_one_line_in_each_oss_words(system, monkeypatch, capsys):
    """gloo's error names its source file, with slashes in Linux's and macOS's builds of torch
    and with backslashes in Windows'; Linux's tcp transport hears the peer go, macOS's and
    Windows' uv transport waits out --timeout (answers.lost_peer): in each, one line and exit
    1, saying what happened."""
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setenv("USE_LIBUV", "1")  # what a08 sets on Windows, undone after

    def all_reduce(*args, **kwargs):
        raise lost_peer()
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    code, _, err = run_main("a08_ddp_torchrun.py", [], capsys)
    assert (code, err) == (1, LOST_PEER[system].format(0) + "\n")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_every_line_is_one_write_where_output_is_unbuffered(stream, monkeypatch):
    """torchrun sets PYTHONUNBUFFERED=1, and Python's -u streams write through: print's text and
    its newline were two writes, between which another process's line could come (CI: two
    `error: process N` lines spliced into one). Under run(), each line is one write."""
    writes = []

    class Recorder(io.RawIOBase):  # the file descriptor, as the OS sees each write
        def writable(self):
            return True

        def write(self, data):
            writes.append(bytes(data))
            return len(data)

    monkeypatch.setattr(sys, stream, io.TextIOWrapper(Recorder(), write_through=True))

    def main():
        print("[CPU1] Test accuracy", 1.0, file=getattr(sys, stream))
        raise runner.UserError("a problem")
    with pytest.raises(SystemExit):
        runner.run(main)
    getattr(sys, stream).flush()
    assert writes == [b"[CPU1] Test accuracy 1.0\n"] + (
        [b"error: a problem\n"] if stream == "stderr" else [])


class Spawned:
    """What torch's start_processes returns, its join raising ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error, self.processes = error, []

    def join(self):
        raise self.error


def spawned(error: Exception, monkeypatch, capsys, port: str = "") -> tuple[int, str]:
    """--spawn 2 whose run ends in ``error``: (exit status, stderr)."""
    import signal

    import torch.multiprocessing as mp

    def start_processes(*args, **kwargs):
        assert os.environ["MASTER_PORT"] == (port or os.environ["MASTER_PORT"])
        return Spawned(error)
    monkeypatch.setattr(mp, "start_processes", start_processes)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # this process keeps its own
    for name, value in {"MASTER_ADDR": "", "MASTER_PORT": port, "USE_LIBUV": ""}.items():
        monkeypatch.setenv(name, value)  # what spawn sets, undone after
    with pytest.raises(SystemExit) as ended:
        processes.start_processes(a08.main, 2, 3)
    return ended.value.code, capsys.readouterr().err


def test_spawn_meets_at_a_port_set_and_shows_a_workers_traceback_once(monkeypatch, capsys):
    """MASTER_PORT, where set, is where the workers meet, as the text's ddp_setup keeps it (and
    the tests' runs started together, each at a port of its own). A worker's error in a line the
    learner edited: torch's spawn hands its traceback to the parent inside a
    ProcessRaisedException, whose own traceback would come around it. The real runs: the stress
    test below."""
    import torch.multiprocessing as mp
    trace = ('Traceback (most recent call last):\n  File "a08_ddp_torchrun.py", line 127, in '
             'main\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (2x2 and 3x30)\n')
    code, err = spawned(mp.ProcessRaisedException(
        f"\n\n-- Process 1 terminated with the following error:\n{trace}", 1, 4321),
        monkeypatch, capsys, port="23456")
    assert code == 1 and err.count("Traceback") == 1 and err.endswith(trace), err


@pytest.mark.parametrize("exit_code, says, status", [
    (3221225477, "ended with exit code 3221225477 (0xC0000005: an access violation, a crash in "
                 "native code (torch, a driver, a DLL)) without saying why", -1073741819),
    (3, "ended with exit code 3 without saying why", 3),  # the C runtime's abort() on Windows
    (-9, "was ended by SIGKILL", 137),
    (1, None, 1),  # runner.fail: the worker said why
])
def test_a_spawn_worker_that_ends_without_a_word_is_one_line(exit_code, says, status,
                                                              monkeypatch, capsys):
    """A worker that crashed in native code: on Windows no signal but a 32-bit NTSTATUS exit
    code (torch's ProcessExitedException carries it), as this process's exit status (negative:
    the same 32 bits, where Python before 3.12.8 would end a larger one as -1)."""
    import torch.multiprocessing as mp
    code, err = spawned(mp.ProcessExitedException("ended", 1, 4321, exit_code), monkeypatch,
                        capsys)
    assert code == status
    assert err == ("" if says is None else
                   f"error: process 1 {says}" + ("" if exit_code < 0 else
                                                ' (see TROUBLESHOOTING.md: "error: process N")')
                   + "\n")


@pytest.mark.stress
def test_a_lost_peer_or_a_learners_error_reaches_the_learner_once(tmp_path_factory):
    """--spawn 2 whose every all_reduce meets a lost peer, in Linux's words and in Windows':
    an `error: process N` line from each process that said it before the run ended, nothing
    else, exit 1; torchrun the same, but for torchrun's own report. A learner's own error under
    --spawn (a model for 3 inputs): one traceback, that worker's."""
    edited = copy_of("a08_ddp_torchrun.py", tmp_path_factory.mktemp("edited"),
                     {"NeuralNetwork(num_inputs=2,": "NeuralNetwork(num_inputs=3,"})
    commands = {"Linux": a08_command("--spawn", "2"), "Windows": a08_command("--spawn", "2"),
                "edited": a08_command("--spawn", "2", script=edited)}
    shims = {"Linux": ["lost_peer"], "Windows": ["as_windows", "lost_peer"], "edited": []}
    if not torchrun_starts.args[0]:
        commands["torchrun"], shims["torchrun"] = a08_command(nproc=2), ["lost_peer"]
    results = run_together(commands, lambda key: tmp_path_factory.mktemp(key),
                           lambda key: clean_env(*shims[key]) | {"MASTER_PORT": str(free_port())})
    for key, result in results.items():
        assert result.returncode == 1, (key, result.stderr[-3000:])
        if key == "edited":
            assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
            assert "mat1 and mat2 shapes cannot be multiplied" in result.stderr
            continue
        ours = [line for line in result.stderr.splitlines() if "error: process" in line]
        words = LOST_PEER["Windows" if key == "Windows" else "Linux"]
        assert ours and set(ours) <= {words.format(rank) for rank in (0, 1)}, result.stderr
        if key != "torchrun":  # whose own report follows
            assert len(ours) == len(result.stderr.splitlines()), result.stderr
