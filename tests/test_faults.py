"""Bad input, unsafe or broken checkpoints, interrupted runs, a worker killed mid-training."""

import contextlib
import io
import os
import platform
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from common import NeuralNetwork
from common.extras.old_torch import torch_older_than
from common.extras.rendezvous import explain_distributed_error

import pytest
import torch
import torch.distributed as dist

from conftest import (
    ROOT,
    TORCH_LOG,
    CodeRunningPickle,
    alive,
    as_torchrun_process,
    child_pids,
    clean_env,
    copy_of_the_clone,
    free_port,
    machine_command,
    needs_proc,
    needs_sigint,
    needs_torchrun,
    processes_mentioning,
    rank_env,
    read_until,
    run_main,
    run_script,
    start_process,
    torchrun_command,
    wait_for_file,
)

BAD_FLAGS = [
    ("a05_training_loop.py", ["--epochs", "0"], "argument --epochs: '0' is not a whole number"),
    ("a05_training_loop.py", ["--batch-size", "-2"], "argument --batch-size: '-2' is not"),
    ("a05_training_loop.py", ["--batch-size", "6"], "argument --batch-size: 6 is larger than"),
    ("a05_training_loop.py", ["--lr", "0"], "argument --lr: '0' is not a number > 0"),
    ("a05_training_loop.py", ["--lr", "nan"], "argument --lr: 'nan' is not a number > 0"),
    ("a05_training_loop.py", ["--seed", "-1"], "argument --seed: '-1' is not a whole number >= 0"),
    ("a06_save_load.py", ["--epochs", "two"], "argument --epochs: 'two' is not a whole number"),
    ("a07_gpu_single.py", ["--device", "gpu"], "argument --device: invalid choice: 'gpu'"),
    ("a07_gpu_single.py", ["--sizes", "64,0"], "argument --sizes: '0' is not a whole number"),
    ("a08_ddp_torchrun.py", ["--lr", "-1"], "argument --lr: '-1' is not a number > 0"),
    ("a08_ddp_torchrun.py", ["--num-samples", "1"],
     "argument --num-samples: 1 examples leave some of the 1 processes without a full batch"),
    ("a08_ddp_torchrun.py", ["--timeout", "0"], "argument --timeout: '0' is not a number > 0"),
    ("a08_ddp_torchrun.py", ["--snapshot", "no/such/folder/s.pt"],
     "argument --snapshot: the folder of no/such/folder/s.pt does not exist"),
]


@pytest.mark.parametrize("case", range(len(BAD_FLAGS)),
                         ids=[f"{s[:3]}{'='.join(a)}" for s, a, _ in BAD_FLAGS])
def test_bad_flag_is_a_usage_error(case, capsys):
    script, argv, message = BAD_FLAGS[case]
    code, out, err = run_main(script, argv, capsys)
    assert code == 2
    assert err.startswith("usage:")
    assert message in err
    assert out == ""


def test_bad_flag_from_the_command_line_has_no_traceback(workdir):
    result = run_script("a05_training_loop.py", "--lr", "-0.5", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "a05_training_loop.py: error: argument --lr: '-0.5' is not a number > 0")
    assert result.stdout == ""


def test_a08_num_samples_smaller_than_world_size(monkeypatch, capsys):
    """Checked before any process group starts, from torchrun's variables alone."""
    as_torchrun_process(monkeypatch, 0, free_port(), world_size=4)
    code, _, err = run_main("a08_ddp_torchrun.py", ["--num-samples", "3"], capsys)
    assert code == 2
    assert ("argument --num-samples: 3 examples leave some of the 4 processes without a full "
            "batch of 2; use at least 8") in err


def make_bad_checkpoints(folder: Path) -> dict[str, str]:
    """name -> what the one-line error must say."""
    import torch
    good = folder / "good.pth"
    torch.save({"layers.0.weight": torch.zeros(30, 2)}, good)
    (folder / "empty.pth").write_bytes(b"")
    (folder / "truncated.pth").write_bytes(good.read_bytes()[:300])
    (folder / "notes.pth").write_text("these are my notes, not a checkpoint\n")
    torch.save(torch.nn.Linear(3, 4).state_dict(), folder / "other_arch.pth")
    torch.save([1, 2, 3], folder / "a_list.pth")
    (folder / "a_folder.pth").mkdir()
    model = NeuralNetwork(2, 2)
    torch.save({"epoch": 3, "model_state_dict": model.state_dict(),  # PyTorch's recipe
                "optimizer_state_dict": torch.optim.SGD(model.parameters(), lr=0.5).state_dict(),
                "loss": 0.1}, folder / "general.pth")
    torch.save(model.state_dict(), folder / "damaged.pth")
    flip_a_byte_of_a_tensor(folder / "damaged.pth")
    return {
        "missing.pth": "missing.pth: no such file",
        "empty.pth": "empty.pth: the file is empty",
        "truncated.pth": "truncated.pth: truncated or corrupt",
        "notes.pth": "notes.pth: not a PyTorch checkpoint",
        "other_arch.pth": "other_arch.pth: saved from another architecture",
        "a_list.pth": "a_list.pth: holds no model state_dict",
        "a_folder.pth": "a_folder.pth: is a folder",
        "general.pth": "general.pth: a general checkpoint (epoch, optimizer, ...), not a "
                       "model's state_dict; its weights are under 'model_state_dict'",
        "damaged.pth": "damaged.pth: damaged (",
    }


def flip_a_byte_of_a_tensor(path: Path) -> None:
    """One byte inside the first tensor's data, as a failing disk or copy would change it:
    the file still loads, with one wrong number, unless its checksums are checked."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26:
                                                          info.header_offset + 30])
    data[info.header_offset + 30 + name_length + extra_length + 5] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    return folder, make_bad_checkpoints(folder)


@pytest.mark.parametrize("name", ["missing.pth", "empty.pth", "truncated.pth", "notes.pth",
                                  "other_arch.pth", "a_list.pth", "a_folder.pth",
                                  "general.pth", "damaged.pth"])
def test_a06_load_bad_file_is_one_line(name, bad_files, capsys):
    folder, expected = bad_files
    code, _, err = run_main("a06_save_load.py", ["--load", str(folder / name)], capsys)
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected[name] in lines[0]


def test_the_damaged_file_would_load_silently_without_the_check(bad_files):
    """The damage is inside a tensor: torch.load alone reads it without complaint."""
    folder, _ = bad_files
    damaged = torch.load(folder / "damaged.pth", weights_only=True)
    assert set(damaged) == set(NeuralNetwork(2, 2).state_dict())


@pytest.mark.parametrize("message, named", [
    ("Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
     "False. If you are running on a CPU-only machine, please use torch.load with "
     "map_location=torch.device('cpu') to map your storages to the CPU.", "a CUDA GPU"),
    # older torch, a file from a Mac (maxrmorrison/torchcrepe#27)
    ("don't know how to restore data location of torch.storage.UntypedStorage (tagged with "
     "mps:0)", "Apple's GPU (MPS)"),
])
def test_a06_names_a_model_saved_on_a_gpu(message, named, tmp_path, monkeypatch, capsys):
    """Simulated: a state_dict saved on Colab's GPU or a Mac's, loaded on a CPU-only laptop
    (torch.load without map_location fails so, worded by torch's version). The cause is named,
    not called corrupt."""
    import a06_save_load
    torch.save(NeuralNetwork(2, 2).state_dict(), tmp_path / "colab.pth")

    def load_on_a_machine_without_that_device(*args, **kwargs):
        raise RuntimeError(message)

    monkeypatch.setattr(a06_save_load.torch, "load", load_on_a_machine_without_that_device)
    code, _, err = run_main("a06_save_load.py", ["--load", str(tmp_path / "colab.pth")], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"error: {tmp_path / 'colab.pth'}: saved on {named}, and this machine has none; "
        f"torch.load(PATH, map_location='cpu', weights_only=True) loads it onto the CPU"]


def saved_on(device: str, path: Path) -> None:
    """A state_dict saved as on ``device``: torch.save's file, with its storages' location tag
    (pickled once, as the text 'cpu') rewritten, and the zip's checksums with it."""
    buffer = io.BytesIO()
    torch.save(NeuralNetwork(2, 2).state_dict(), buffer)
    with zipfile.ZipFile(buffer) as source, zipfile.ZipFile(path, "w") as target:
        for member in source.infolist():
            data = source.read(member)
            if member.filename.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu",
                                    b"X" + len(device).to_bytes(4, "little") + device.encode())
            target.writestr(member, data)


@pytest.mark.parametrize("device, named", [
    pytest.param("mps", "Apple's GPU (MPS)", marks=pytest.mark.skipif(
        torch.backends.mps.is_built(), reason="this torch loads MPS tensors (a Mac)")),
    ("cuda", "a CUDA GPU"), ("xpu", "an Intel GPU (XPU)"), ("npu", "a device named 'npu'")])
def test_a06_names_the_device_a_file_was_saved_on(device, named, tmp_path, capsys):
    """A model trained by a07 on a Mac (MPS) and loaded on Colab, Linux or Windows: torch says
    'Storage device not recognized: mps', and a06 called the file truncated or corrupt
    (pytorch/pytorch#87504). The file here is real, its tensors tagged as saved there."""
    saved_on(device, tmp_path / "m.pth")
    code, _, err = run_main("a06_save_load.py", ["--load", str(tmp_path / "m.pth")], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"error: {tmp_path / 'm.pth'}: saved on {named}, and this machine has none; "
        f"torch.load(PATH, map_location='cpu', weights_only=True) loads it onto the CPU"]
    assert torch.load(tmp_path / "m.pth", map_location="cpu", weights_only=True).keys() == \
        NeuralNetwork(2, 2).state_dict().keys()  # as the line says


def test_an_error_in_a_line_the_learner_edited_keeps_its_traceback(tmp_path):
    """The file is fine; the learner's edit of a06's load line is wrong (a keyword mistyped).
    Before: 'holds no model state_dict', a bad checkpoint blamed for the learner's line (a
    mistyped name was 'not a PyTorch checkpoint (NameError)')."""
    edit = "torch.load(path, weights_only=True)))"
    error = "torch.load(path, weights_only=True), strictt=True))"
    clone = copy_of_the_clone(tmp_path, "a05_training_loop.py", "a06_save_load.py")
    script = clone / "a06_save_load.py"
    assert edit in script.read_text()
    script.write_text(script.read_text().replace(edit, error))
    torch.save(NeuralNetwork(2, 2).state_dict(), tmp_path / "good.pth")
    result = subprocess.run([sys.executable, str(script), "--load", "good.pth"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, env=clean_env())
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback (most recent call last):"), result.stderr
    assert "a06_save_load.py" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("TypeError:")
    assert "error: " not in result.stderr


def test_a06_load_scores_every_training_example_the_same_every_time(tmp_path, capsys):
    """A model that always predicts class 0 is right on 3 of the 5 training examples: 0.6 on
    every run (the shuffling training loader would score 4 of them, another 4 each time)."""
    model = NeuralNetwork(2, 2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        model.layers[4].bias.copy_(torch.tensor([1.0, 0.0]))
    torch.save(model.state_dict(), tmp_path / "class0.pth")
    for _ in range(4):
        code, out, err = run_main("a06_save_load.py", ["--load", str(tmp_path / "class0.pth")],
                                  capsys)
        assert code == 0, err
        three_of_five = (torch.tensor(3.0) / 5).item()  # compute_accuracy's float32 division
        assert f"Training accuracy: {three_of_five}\nTest accuracy: 0.5\n" in out


def test_a06_load_bad_file_from_the_command_line(bad_files):
    folder, _ = bad_files
    result = run_script("a06_save_load.py", "--load", "truncated.pth", cwd=folder)
    assert result.returncode == 1
    assert result.stderr == ("error: truncated.pth: truncated or corrupt (RuntimeError); "
                             "save the checkpoint again\n")


def test_a06_never_runs_code_from_a_checkpoint(tmp_path, capsys):
    """A file built to run code when unpickled is refused, and the code does not run."""
    import torch
    marker = tmp_path / "CODE_RAN"
    torch.save({"layers.0.weight": CodeRunningPickle(marker)}, tmp_path / "evil.pth")
    code, _, err = run_main("a06_save_load.py", ["--load", str(tmp_path / "evil.pth")], capsys)
    assert code == 1
    assert "evil.pth: refused" in err
    assert not marker.exists()


def test_a08_never_runs_code_from_a_snapshot(tmp_path, capsys):
    """The same for a08's --snapshot: refused in one line before training, the code not run."""
    import torch
    marker = tmp_path / "CODE_RAN"
    snapshot = tmp_path / "evil.pt"
    torch.save({"epochs_completed": 1, "model": CodeRunningPickle(marker)}, snapshot)
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot)], capsys)
    assert code == 1
    assert err.startswith(f"error: {snapshot}: refused")
    assert len(err.splitlines()) == 1
    assert "Epoch:" not in out
    assert not marker.exists()


def test_checkpoint_killed_mid_save_leaves_previous_file_whole(tmp_path):
    """SIGKILL while torch.save writes through atomic_path (here: the moment it has written
    part of the file, deterministically): the old checkpoint is untouched and still loads."""
    import torch
    target = tmp_path / "model.pth"
    torch.save({"w": torch.arange(10.0)}, target)
    before = target.read_bytes()
    writer = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, sys, torch; sys.path.insert(0, sys.argv[1])\n"
         "from common.extras.checkpoint import atomic_path\n"
         "with atomic_path(sys.argv[2]) as tmp:\n"
         "    torch.save({'w': torch.ones(100_000)}, tmp)\n"
         "    os.truncate(tmp, os.path.getsize(tmp) // 2)  # as a write cut short\n"
         "    os.kill(os.getpid(), signal.SIGKILL)\n", str(ROOT), str(target)],
        timeout=60)
    assert writer.returncode == -signal.SIGKILL
    assert list(tmp_path.glob(".model.pth.*.tmp")), "the save was not caught in progress"
    assert target.read_bytes() == before
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.arange(10.0))


def test_atomic_save_that_fails_keeps_previous_file_and_no_temp(tmp_path):
    import torch
    sys.path.insert(0, str(ROOT))
    from common.extras.checkpoint import atomic_path
    target = tmp_path / "model.pth"
    with atomic_path(target) as tmp:
        torch.save({"w": torch.ones(3)}, tmp)
    with pytest.raises(Exception), atomic_path(target) as tmp:  # noqa: B017
        torch.save({"w": torch.zeros(3), "f": lambda: 0}, tmp)  # pickling fails partway
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pth"]


def loss_epochs(stdout: str, rank: int = 0) -> list[int]:
    return [int(line.split("Epoch: ")[1][:3]) for line in stdout.splitlines()
            if line.startswith(f"[CPU{rank}] Epoch: ")]


def test_a08_snapshot_resumes_without_repeating_epochs(tmp_path, capsys):
    snapshot = str(tmp_path / "snap.pt")
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", snapshot, "--epochs", "2"],
                              capsys)
    assert code == 0, err
    assert loss_epochs(out) == [1, 1, 2, 2]
    second = run_script("a08_ddp_torchrun.py", "--snapshot", "snap.pt", "--epochs", "3",
                        cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert ("[CPU0] Resuming from epoch 2 (snap.pt): continuing with epoch 3\n"
            in second.stdout)
    assert loss_epochs(second.stdout) == [3, 3]
    # the same losses as one uninterrupted 3-epoch run (spec: 0.04, 0.01 in epoch 3)
    assert "[CPU0] Epoch: 003/003 | Batchsize 002 | Train/Val Loss: 0.04\n" \
           "[CPU0] Epoch: 003/003 | Batchsize 002 | Train/Val Loss: 0.01\n" in second.stdout
    assert "[CPU0] Training accuracy 1.0\n" in second.stdout


def test_a08_unusable_snapshot_is_one_line(tmp_path, capsys):
    snapshot = tmp_path / "snap.pt"
    snapshot.write_text("not a snapshot")
    code, _, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot)], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"error: {snapshot}: not a PyTorch checkpoint; give a file saved with torch.save"]


def test_a08_error_frees_the_ddp_model_before_leaving_the_group(tmp_path, capsys, monkeypatch):
    """The error's traceback holds a08's DDP model, and a DDP model freed after its process
    group may hang: leaving the group after an error must let the model go first."""
    import gc

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    alive_at_destroy = []
    destroy = dist.destroy_process_group

    def checking_destroy(*args, **kwargs):
        alive_at_destroy.append(sum(type(o) is DistributedDataParallel
                                    for o in gc.get_objects()))
        return destroy(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", checking_destroy)
    snapshot = tmp_path / "snap.pt"
    snapshot.write_text("not a snapshot")
    code, _, _ = run_main("a08_ddp_torchrun.py", ["--snapshot", str(snapshot)], capsys)
    assert code == 1
    assert alive_at_destroy == [0]
    assert not dist.is_initialized()


@needs_sigint
def test_ctrl_c_stops_a08_promptly_without_traceback(tmp_path):
    process = start_process([sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--epochs",
                             "100000"], tmp_path)
    read_until(process, "Epoch:")
    process.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - start < 10
    assert process.returncode == 130
    assert "Interrupted (Ctrl-C)" in stderr
    assert "Traceback" not in stderr


def kill_one_worker_and_resume(folder: Path) -> subprocess.CompletedProcess:
    """torchrun --max-restarts=3, 2 workers; SIGKILL one after the first snapshot."""
    snapshot = folder / "snap.pt"
    command = torchrun_command(2, "--snapshot", str(snapshot), "--epochs", "12",
                               "--num-samples", "400")
    command.insert(3, "--max-restarts=3")
    launcher = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=clean_env())
    deadline = time.monotonic() + 120
    while not snapshot.exists() and time.monotonic() < deadline and launcher.poll() is None:
        time.sleep(0.05)
    workers = child_pids(launcher.pid)
    assert snapshot.exists() and len(workers) == 2, "no snapshot, or not two workers"
    os.kill(workers[-1], signal.SIGKILL)
    stdout, stderr = launcher.communicate(timeout=300)
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)


def check_recovered(result: subprocess.CompletedProcess, folder: Path) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = [line for line in result.stdout.splitlines() if "Resuming from epoch" in line]
    assert len(resumed) == 2, result.stdout
    epoch = int(resumed[0].split("Resuming from epoch ")[1].split()[0])
    assert epoch >= 1
    for rank in (0, 1):
        epochs = loss_epochs(result.stdout, rank)
        after = epochs[epochs.index(epoch + 1):] if epoch < 12 else []
        assert after == sorted(after) and (not after or after[0] == epoch + 1)
        assert epochs[-1] == 12
    assert "[CPU0] Training accuracy 1.0" in result.stdout
    assert "[CPU1] Training accuracy 1.0" in result.stdout
    assert "Global training accuracy over all 2 processes: 1.0 (400 of 400 examples)" \
        in result.stdout
    assert processes_mentioning(str(folder / "snap.pt")) == [], "processes left behind"


@pytest.mark.stress
@needs_torchrun
@needs_proc
def test_a08_recovers_from_a_killed_worker_three_times(tmp_path):
    for cycle in range(3):
        folder = tmp_path / f"cycle{cycle}"
        folder.mkdir()
        check_recovered(kill_one_worker_and_resume(folder), folder)


@pytest.mark.stress
@needs_torchrun
@needs_proc
def test_a08_hung_peer_ends_within_the_timeout(tmp_path):
    """SIGSTOP one worker: the other gives up after --timeout instead of waiting forever.
    (The stopped one is then killed here: torchrun would wait 30 s more for it to obey.)"""
    command = torchrun_command(2, "--epochs", "100000", "--timeout", "5")
    launcher = start_process(command, tmp_path)
    read_until(launcher, "Epoch:")
    workers = child_pids(launcher.pid)
    os.kill(workers[-1], signal.SIGSTOP)
    start = time.monotonic()
    try:
        while alive(workers[0]) and time.monotonic() - start < 90:
            time.sleep(0.1)
        gave_up = time.monotonic() - start
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    assert gave_up < 60


def test_a08_unreachable_master_is_one_line(monkeypatch, capsys):
    """Process 1 of 2, and nobody listens at MASTER_ADDR:MASTER_PORT."""
    port = free_port()
    start = time.monotonic()
    as_torchrun_process(monkeypatch, 1, port)
    code, _, err = run_main("a08_ddp_torchrun.py", ["--timeout", "1"], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"error: process 1 could not join the process group at 127.0.0.1:{port} "
        f"(MASTER_ADDR:MASTER_PORT) within --timeout: check that the first machine's torchrun "
        f"runs, the address and port, that no firewall blocks the port, and on several "
        f"machines GLOO_SOCKET_IFNAME (README: Several machines)"]
    assert time.monotonic() - start < 60


def test_a08_port_in_use_is_one_line(monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        as_torchrun_process(monkeypatch, 0, port)
        code, _, err = run_main("a08_ddp_torchrun.py", ["--timeout", "3"], capsys)
    assert code == 1
    assert err.splitlines() == [
        f"error: process 0: the port of 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) is already "
        f"in use (another run?); choose a free one with torchrun --master_port=PORT, or use "
        f"torchrun --standalone"]


GLOO_UV = "[enforce fail at ..\\third_party\\gloo\\gloo\\transport\\uv\\device.cc:153] "
NO_TRANSPORT = ("error: process 0: this torch build's gloo has no network transport for this "
                "system (reported with Windows builds of torch 2.7 to 2.12), and "
                "GLOO_SOCKET_IFNAME cannot help: install another torch version, or run under WSL2")
MAC_HOSTNAME = ("error: process 0: gloo found no network device for this Mac's hostname; on one "
                "machine set GLOO_SOCKET_IFNAME=lo0 (on several, the interface that ifconfig "
                "lists with the address the others reach, such as en0)")


@pytest.mark.parametrize(("system", "ifname", "failure", "expected"), [
    # Windows builds whose gloo has no transport, whatever the interface
    ("Windows", None, GLOO_UV + "rp != nullptr. makeDeviceForHostname(): unsupported gloo device",
     NO_TRANSPORT),
    ("Windows", None, GLOO_UV + "rp != nullptr. makeDeviceForInterface(): unsupported gloo "
     "device", NO_TRANSPORT),
    # GLOO_SOCKET_IFNAME set to an interface this machine does not have
    ("Linux", "eth7", "[enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:85] "
     "ifa != nullptr. Unable to find address for: eth7",
     "error: process 0: GLOO_SOCKET_IFNAME names eth7, which is no network interface with an "
     "address on this machine: set it to one that ipconfig or ip addr lists, or unset it"),
    # a Mac whose name resolves to no address (before: called a bad GLOO_SOCKET_IFNAME)
    ("Darwin", None, "[enforce fail at /Users/runner/work/pytorch/third_party/gloo/gloo/"
     "transport/uv/device.cc:129] rp != nullptr. Unable to find address for: Anns-MacBook.local",
     MAC_HOSTNAME),
    ("Darwin", None, GLOO_UV + "makeDeviceForHostname(): no address for the hostname",
     MAC_HOSTNAME),
])
def test_a08_gloo_device_errors_name_their_cause(system, ifname, failure, expected, monkeypatch,
                                                 capsys):
    """Simulated: init_process_group fails as gloo does for each cause, on each system."""
    import a08_ddp_torchrun

    def no_device(*args, **kwargs):
        raise RuntimeError(failure)

    monkeypatch.setattr(a08_ddp_torchrun, "init_process_group", no_device)
    monkeypatch.setattr(platform, "system", lambda: system)
    if ifname:
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", ifname)
    else:
        monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    code, _, err = run_main("a08_ddp_torchrun.py", ["--device", "cpu"], capsys)
    assert code == 1
    assert err.splitlines() == [expected]


@pytest.mark.parametrize(("backend", "hint"), [("nccl", True), ("gloo", False)])
def test_a_collective_that_times_out_names_nccls_settings_on_nccl(backend, hint, monkeypatch):
    """Simulated: a collective gives up after --timeout; on NCCL (consumer GPUs that may not
    copy peer to peer, WSL2) the line names the two settings that find or fix it."""
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda *args: backend)

    line = explain_distributed_error(dist.DistBackendError(
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=BROADCAST) ran for 120000 milliseconds before timing out. Timed out"))
    assert line.startswith("process 0 lost contact with another process")
    assert ("NCCL_P2P_DISABLE=1" in line and "NCCL_DEBUG=INFO" in line) == hint


def test_nccls_shared_memory_failure_under_wsl2_names_the_setting(monkeypatch):
    """Simulated: WSL2's small /dev/shm (microsoft/WSL#12467), as NCCL reports it."""
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda *args: "nccl")
    line = explain_distributed_error(dist.DistBackendError(
        "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nncclUnhandledCudaError: "
        "Call to CUDA function failed.\nLast error:\nError while creating shared memory "
        "segment /dev/shm/nccl-g0wGsu (size 9637888)"))
    assert line == ("process 0: NCCL could not create its shared memory in /dev/shm (WSL2 and "
                    "containers keep it small): set NCCL_SHM_DISABLE=1 (between consumer GPUs "
                    "also NCCL_P2P_DISABLE=1); NCCL_DEBUG=INFO shows more")


@pytest.mark.parametrize("gpus", [1, 2])
def test_a08_on_windows_trains_on_the_cpu_beside_gpus(gpus, monkeypatch, capsys):
    """Simulated Windows with CUDA GPUs: gloo there crashes on CUDA tensors, so --device auto
    trains on the CPU and says why, and --device cuda is one usage line."""
    import a08_ddp_torchrun
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    parse = a08_ddp_torchrun.extras.parse_a08_flags
    device = parse(a08_ddp_torchrun.__doc__, [])[2]
    assert device == torch.device("cpu")
    reason = ("on Windows the processes meet through gloo, which cannot carry CUDA tensors (an "
              "access violation from torch 2.8 on, pytorch/pytorch#186535); use --device cpu "
              "(or auto), or WSL2 for NCCL")
    assert capsys.readouterr().out == f"Note: training on the CPU: {reason}\n"
    with pytest.raises(SystemExit) as stopped:
        parse(a08_ddp_torchrun.__doc__, ["--device", "cuda"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"argument --device cuda: {reason}")


def test_a08_spawn_under_torchrun_is_a_usage_error(monkeypatch, capsys):
    as_torchrun_process(monkeypatch, 0, free_port())
    code, _, err = run_main("a08_ddp_torchrun.py", ["--spawn", "2"], capsys)
    assert code == 2
    assert err.splitlines()[-1] == (
        "a08_ddp_torchrun.py: error: argument --spawn: torchrun already started the "
        "processes; use one or the other")


def test_every_tcpstore_a08_makes_honours_use_libuv(monkeypatch):
    """USE_LIBUV=0 (a08 sets it on Windows, where torch has no libuv) reaches the TCPStore."""
    from datetime import timedelta

    from common.extras import rendezvous
    from common.extras.launcher import read_launch

    import torch.distributed as dist
    made = []

    class FakeStore:
        def __init__(self, *args, **kwargs):
            made.append(kwargs)

        def add(self, key, amount):
            return 1

    monkeypatch.setattr(dist, "TCPStore", FakeStore)
    monkeypatch.setattr(dist, "PrefixStore", lambda prefix, store: store)
    for key, value in rank_env(1, 29500).items():
        monkeypatch.setenv(key, value)
    for use_libuv, agent_store in [("0", "True"), ("0", "False"), ("1", "True")]:
        monkeypatch.setenv("USE_LIBUV", use_libuv)
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", agent_store)
        rendezvous.store_for_this_attempt(read_launch(), timedelta(seconds=5))
    libuv = not torch_older_than(2, 4)  # before 2.4 libuv was not the default: not asked for
    assert [kwargs["use_libuv"] for kwargs in made] == [False, False, libuv]


def two_machines(folder: Path, *args: str) -> list[subprocess.Popen]:
    """Two simulated machines with --max-restarts=3, one process each, their output in files
    (``outputs`` reads them): a pipe that nobody reads would stall one machine, and the other
    would wait for it."""
    port = free_port()
    return [start_process(machine_command(node, 1, port, *args, max_restarts=3), folder,
                          stdout=(folder / f"out{node}.txt").open("w"),
                          stderr=(folder / f"err{node}.txt").open("w"))
            for node in (0, 1)]


def outputs(folder: Path, launches: list[subprocess.Popen]) -> list[tuple[str, str]]:
    """(stdout, stderr) of each machine of ``two_machines``, once it has ended."""
    for launch in launches:
        launch.wait(timeout=300)
    return [((folder / f"out{node}.txt").read_text(), (folder / f"err{node}.txt").read_text())
            for node in (0, 1)]


@pytest.mark.stress
@needs_torchrun
@needs_proc
def test_a08_worker_lost_on_one_of_two_machines_three_times(tmp_path):
    """Each cycle: two simulated machines with --max-restarts, the worker on the second killed
    after the first snapshot. The survivor says so in one line; both torchruns restart their
    workers, which agree on fresh keys and resume from the snapshot, and finish."""
    for cycle in range(3):
        folder = tmp_path / f"cycle{cycle}"
        folder.mkdir()
        snapshot = folder / "snap.pt"
        launches = two_machines(folder, "--snapshot", str(snapshot), "--epochs", "12",
                                "--num-samples", "400")
        wait_for_file(snapshot, launches)
        workers = child_pids(launches[1].pid)
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)
        ended = outputs(folder, launches)
        for launch, (_, stderr) in zip(launches, ended, strict=True):
            assert launch.returncode == 0, stderr[-3000:]
        (out0, err0), (out1, _) = ended
        for rank, out in ((0, out0), (1, out1)):
            assert re.search(rf"^\[CPU{rank}\] Resuming from epoch \d+ \(.*snap\.pt\): "
                             rf"continuing with epoch \d+$", out, flags=re.M), out
            assert f"[CPU{rank}] Training accuracy 1.0" in out
        assert "Global training accuracy over all 2 processes: 1.0 (400 of 400 examples)" \
            in out0
        ours = [line for line in err0.splitlines() if not TORCH_LOG.match(line)]
        assert "Traceback" not in err0
        assert ours == ["error: process 0 lost contact with another process (it crashed, was "
                        "killed, or hangs). With --max-restarts=3, torchrun restarts all "
                        "processes; with --snapshot PATH they, or the same command run again, "
                        "resume from the last epoch"], err0
        assert processes_mentioning(str(snapshot)) == [], "processes left behind"


@pytest.mark.stress
@needs_torchrun
@needs_proc
def test_a08_sigterm_stops_at_once_keeps_the_snapshot_and_resumes(tmp_path):
    """What SLURM or Kubernetes does before preempting a job: SIGTERM to torchrun."""
    import torch
    snapshot = tmp_path / "snap.pt"
    command = torchrun_command(2, "--snapshot", str(snapshot), "--epochs", "100000",
                               "--num-samples", "400")
    launcher = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=clean_env() | {"OMP_NUM_THREADS": "1"})  # no warning
    wait_for_file(snapshot, [launcher])
    time.sleep(0.5)  # into the next epochs, so that a snapshot may be being written
    start = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    _, stderr = launcher.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert launcher.returncode != 0
    ours = [line for line in stderr.splitlines()
            if line.strip() and not TORCH_LOG.match(line) and not line.startswith(" ")
            and "Traceback" not in line and "SignalException" not in line]
    assert ours == ["Stopped (SIGTERM, e.g. a preempted job): files already written are whole; "
                    "with --snapshot, the same command resumes from the last epoch."], stderr
    completed = torch.load(snapshot, weights_only=True)["epochs_completed"]  # whole
    assert completed >= 1
    assert processes_mentioning(str(snapshot)) == [], "processes left behind"
    rerun = subprocess.run(torchrun_command(2, "--snapshot", str(snapshot), "--epochs",
                                            str(completed + 2), "--num-samples", "400"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=180,
                           env=clean_env())
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (f"[CPU0] Resuming from epoch {completed} (" in rerun.stdout)
    assert loss_epochs(rerun.stdout) == [completed + 1] * 100 + [completed + 2] * 100


@pytest.mark.stress
@needs_sigint
def test_ctrl_c_stops_a08_spawn_with_one_line(tmp_path):
    """A terminal's Ctrl-C reaches the parent and every worker of --spawn: one line, not three."""
    process = start_process([sys.executable, str(ROOT / "a08_ddp_torchrun.py"), "--spawn", "2",
                             "--epochs", "100000"], tmp_path, start_new_session=True)
    read_until(process, "Epoch:")
    os.killpg(process.pid, signal.SIGINT)  # the whole process group, as a terminal does
    start = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - start < 15
    assert process.returncode == 130
    assert stderr.strip().splitlines() == [
        "Interrupted (Ctrl-C): stopped before the end; files already written are whole."]
