"""Saving (--snapshot) never damages what is there; a file that cannot be loaded is one line
(a06 --load)."""

import contextlib
import io
import json
import os
import signal
import tempfile
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from common import NeuralNetwork, checkpoints, runner
from conftest import ROOT, WINDOWS, CodeRunningPickle, copy_of, links, posix_signals, run_main


def saved_on(device: str, path: Path) -> None:
    """A state_dict saved as on ``device``: torch.save's file with its storages' location tag
    (pickled as the text 'cpu') rewritten."""
    buffer = io.BytesIO()
    torch.save(NeuralNetwork(2, 2).state_dict(), buffer)
    with zipfile.ZipFile(buffer) as source, zipfile.ZipFile(path, "w") as target:
        for member in source.infolist():
            data = source.read(member)
            if member.filename.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu",
                                    b"X" + len(device).to_bytes(4, "little") + device.encode())
            target.writestr(member, data)


def bad_files(folder: Path) -> dict[str, str]:
    """name -> the one line a06 --load must say of it."""
    model = NeuralNetwork(2, 2)
    good = folder / "good.pth"
    torch.save(model.state_dict(), good)
    (folder / "empty.pth").write_bytes(b"")
    (folder / "truncated.pth").write_bytes(good.read_bytes()[:300])
    (folder / "notes.pth").write_text("these are my notes, not a checkpoint\n")
    torch.save(torch.nn.Linear(3, 4).state_dict(), folder / "other_arch.pth")
    (folder / "a_folder.pth").mkdir()
    torch.save({"epoch": 3, "model_state_dict": model.state_dict()}, folder / "general.pth")
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, folder / "ddp.pth")
    # torch.compile(model).state_dict(), as test_snapshots' "compiled" edit makes it
    torch.save({f"_orig_mod.{k}": v for k, v in model.state_dict().items()},
               folder / "compiled.pth")
    torch.save({"w": CodeRunningPickle(folder / "CODE_RAN")}, folder / "evil.pth")
    (folder / "page.pth").write_text("<!DOCTYPE html>\n<html><head><title>Sign in</title>")
    # what a clone without Git LFS holds where the file should be (git-lfs's spec)
    (folder / "lfs.pth").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:"
                                    f"{'0' * 64}\nsize 3291\n")
    safetensors(model.state_dict(), folder / "model.safetensors")
    saved_on("cuda", folder / "colab.pth")
    saved_on("mps", folder / "mac.pth")
    return {
        "missing.pth": "missing.pth: no such file; check the path, or train and save first",
        "empty.pth": "empty.pth: the file is empty (an interrupted save?); save it again",
        "truncated.pth": "truncated.pth: cut short (a zip archive without its end: a download "
                         "or a save that stopped midway); download or save it again",
        "notes.pth": "notes.pth: a text file, not a checkpoint; check the path",
        "page.pth": "page.pth: a web page (HTML), not a checkpoint: the link gave a page, not "
                    "the file; download the file itself",
        "lfs.pth": "lfs.pth: a Git LFS pointer, not the file itself (a clone made without Git "
                   "LFS); run git lfs pull in that clone, or download the file itself",
        "model.safetensors": "model.safetensors: a safetensors file, not torch.save's: "
                             "model.load_state_dict(safetensors.torch.load_file(PATH)) loads it "
                             "(pip install safetensors)",
        "other_arch.pth": 'other_arch.pth: does not fit this model (Missing key(s) in '
                          'state_dict: "layers.0.weight"',
        "a_folder.pth": "a_folder.pth: a folder, not a saved file; check the path",
        "general.pth": "general.pth: a checkpoint that holds more than the model; its weights "
                       "are under 'model_state_dict'",
        "ddp.pth": "ddp.pth: saved from a DistributedDataParallel model (keys start with "
                   "'module.')",
        "compiled.pth": "compiled.pth: saved from a torch.compile model (keys start with "
                        "'_orig_mod.'); save model._orig_mod.state_dict() instead, or load it "
                        "into the model with torch.nn.modules.utils."
                        "consume_prefix_in_state_dict_if_present(state_dict, '_orig_mod.') first",
        "evil.pth": "evil.pth: refused: it holds Python objects, not only tensors, and "
                    "loading it could run code",
        "colab.pth": "colab.pth: saved on cuda, which this machine lacks; torch.load(PATH, "
                     "map_location='cpu', weights_only=True) loads it onto the CPU",
        "mac.pth": "mac.pth: saved on mps, which this machine lacks",
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    return folder, bad_files(folder)


def safetensors(tensors: dict, path: Path) -> None:
    """A safetensors file, as the format's specification lays it out (no package needed): the
    JSON header's length (8 bytes, little-endian), the header, then the tensors' bytes."""
    header, data = {}, b""
    for name, tensor in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


@pytest.mark.parametrize("name", ["missing.pth", "empty.pth", "truncated.pth", "notes.pth",
                                  "page.pth", "lfs.pth", "model.safetensors",
                                  "other_arch.pth", "a_folder.pth", "general.pth", "ddp.pth",
                                  "compiled.pth", "evil.pth", "colab.pth", "mac.pth"])
def test_a06_load_of_an_unusable_file_is_one_line(name, files, capsys):
    if name == "mac.pth" and torch.backends.mps.is_built():
        pytest.skip("this torch loads MPS tensors (a Mac)")
    folder, expected = files
    code, out, err = run_main("a06_save_load.py", ["--load", str(folder / name)], capsys)
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {folder / name}: "), err
    assert expected[name] in err
    assert ("weights_only=False" in err) == (name == "evil.pth")  # only where objects are
    assert "Predicted" not in out
    assert not (folder / "CODE_RAN").exists()


def test_the_explained_remedies_work(files):
    folder, _ = files
    state = torch.load(folder / "colab.pth", map_location="cpu", weights_only=True)
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(
        ddp := torch.load(folder / "ddp.pth", weights_only=True), "module.")
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(
        compiled := torch.load(folder / "compiled.pth", weights_only=True), "_orig_mod.")
    for loaded in (state, ddp, compiled):
        NeuralNetwork(2, 2).load_state_dict(loaded)


def test_an_error_in_a_line_the_learner_edited_keeps_its_traceback(files):
    """The file is fine, the learner's edit of a06's load line is wrong (a keyword mistyped):
    the edited script, run from its own path in the clone."""
    folder, _ = files
    source = (ROOT / "a06_save_load.py").read_text(encoding="utf-8")
    line = "torch.load(load, weights_only=True)))"
    assert line in source
    edited = {"__name__": "edited"}
    exec(compile(source.replace(line, "torch.load(load, weights_only=True), strictt=True))"),
                 str(ROOT / "a06_save_load.py"), "exec"), edited)
    with pytest.raises(TypeError, match="strictt"):
        runner.run(edited["main"], str(folder / "good.pth"))  # --load


def killed_mid_save(target: Path) -> int:
    """--snapshot's atomic_path writing half of ``target``'s new file, then SIGKILLed: no
    finally, no handler runs. In a forked copy of this process (POSIX: marker posix_signals),
    not a new interpreter: its exit status."""
    tensors = {"w": torch.ones(100_000)}  # made here: the child only writes
    with warnings.catch_warnings():  # Python 3.12+: fork of a process with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            with checkpoints.atomic_path(str(target), "--snapshot") as tmp:
                half_saved(tensors, tmp)
        finally:
            os._exit(1)  # never reached but where the save failed
    return os.waitpid(pid, 0)[1]


def half_saved(tensors: dict, path: str) -> None:
    torch.save(tensors, path)
    os.truncate(path, os.path.getsize(path) // 2)  # as a write cut short
    os.kill(os.getpid(), signal.SIGKILL)


@posix_signals
def test_a_kill_mid_save_leaves_the_previous_file_whole_and_the_next_save_cleans_up(tmp_path):
    target = tmp_path / "s.pt"
    torch.save({"w": torch.arange(10.0)}, target)
    before = target.read_bytes()
    status = killed_mid_save(target)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    assert len(list(tmp_path.glob(".s.pt.*.tmp"))) == 1, "not caught mid-save"
    assert target.read_bytes() == before
    with checkpoints.atomic_path(str(target), "--snapshot") as tmp:
        torch.save({"w": torch.ones(3)}, tmp)
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]


def test_a_writability_probe_a_signal_cut_short_goes_with_the_next_save(tmp_path, monkeypatch):
    """a08 saves --snapshot every epoch, each save probing first: a SIGTERM inside the probe
    left `.s.pt.x8k2` beside the snapshot (seen with epochs of a few milliseconds)."""
    probe = tempfile.NamedTemporaryFile
    monkeypatch.setattr(checkpoints.tempfile, "NamedTemporaryFile",
                        lambda **kwargs: probe(delete=False, **kwargs))  # as if killed in it
    assert checkpoints.check_writable(str(tmp_path / "s.pt"), "--snapshot") is None
    monkeypatch.undo()
    with checkpoints.atomic_path(str(tmp_path / "s.pt"), "--snapshot") as tmp:
        torch.save({}, tmp)
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]


def test_a_saved_file_has_the_modes_any_new_file_gets(tmp_path):
    """The temporary file is private (mkstemp); the saved one is not: under a umask of 027,
    0o640; on Windows, which keeps only a read-only flag, 0o666."""
    umask = os.umask(0o27)
    try:
        with checkpoints.atomic_path(str(tmp_path / "model.pth"), "--snapshot") as tmp:
            torch.save({"w": torch.ones(3)}, tmp)
    finally:
        os.umask(umask)
    assert (tmp_path / "model.pth").stat().st_mode & 0o777 == (0o666 if WINDOWS else 0o640)


def test_a_save_that_fails_keeps_the_previous_file(tmp_path):
    target = tmp_path / "model.pth"
    torch.save({"w": torch.ones(3)}, target)
    with pytest.raises(AttributeError), \
            checkpoints.atomic_path(str(target), "--snapshot") as tmp:
        torch.save({"w": torch.zeros(3), "f": lambda: 0}, tmp)  # pickling fails partway
    with pytest.raises(runner.UserError, match="model.pth: cannot write it "
                                              r"\(No space left on device\)"), \
            checkpoints.atomic_path(str(target), "--snapshot") as tmp:
        raise OSError(28, "No space left on device")
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["model.pth"]


def test_a_save_another_program_holds_is_tried_again_then_named(tmp_path, monkeypatch):
    """Windows: an antivirus, OneDrive or an editor holds the snapshot, and the rename fails
    with 'Access is denied' (ultralytics/yolov5#12680): a moment's hold passes; a long one
    is named, and the previous file stays."""
    real_replace, calls = os.replace, []
    target = tmp_path / "s.pt"

    def held(source, to, times):  # the snapshot held, not the files it is saved through
        if Path(to) == target:
            calls.append(to)
            if len(calls) <= times:
                raise PermissionError(13, "Access is denied")
        return real_replace(source, to)

    monkeypatch.setattr(checkpoints.time, "sleep", lambda seconds: None)
    for times, expected in ((3, None), (10**6, "cannot replace it (Access is denied): another "
                                               "program may hold the file (an antivirus, "
                                               "OneDrive, an editor); close it, or choose "
                                               "another --snapshot")):
        monkeypatch.setattr(os, "replace", lambda s, t, times=times: held(s, t, times))
        before = target.read_bytes() if target.exists() else None
        with contextlib.ExitStack() as stack:
            error = stack.enter_context(pytest.raises(runner.UserError)) if expected else None
            with checkpoints.atomic_path(str(target), "--snapshot") as tmp:
                torch.save({"times": times}, tmp)
        if expected:
            assert str(error.value) == f"{target}: {expected}"
            assert target.read_bytes() == before
        calls.clear()
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]


def test_a_read_only_snapshot_on_windows_is_named_before_training(tmp_path, monkeypatch,
                                                                  capsys):
    """Windows replaces no read-only file (os.replace: 'Access is denied', as
    shims/windows_rules answers it); Linux and macOS do, so there a08 saves over it."""
    target = tmp_path / "s.pt"
    target.write_bytes(b"old")
    target.chmod(0o444)
    monkeypatch.setattr(checkpoints.platform, "system", lambda: "Windows")
    code, out, err = run_main("a08_ddp_torchrun.py", ["--snapshot", str(target)], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1].endswith(
        f"argument --snapshot: {target} is read-only; make it writable (its Properties), or "
        f"choose another --snapshot")
    assert target.read_bytes() == b"old"


@pytest.mark.parametrize("make, message", [
    (lambda here: (here / "model.pth").mkdir(), "model.pth is a folder"),
    pytest.param(lambda here: (here / "model.pth").symlink_to("/dev/null"),
                 "model.pth is not a regular file", marks=[links, pytest.mark.skipif(
                     WINDOWS, reason="/dev/null: Linux, macOS")]),
])
def test_a_model_pth_that_cannot_be_written_is_refused_before_training(make, message, tmp_path,
                                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    make(tmp_path)
    code, out, err = run_main("a06_save_load.py", [], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1].endswith(
        f"error: {message}; choose another folder to run a06 in")


@links
def test_a_link_is_followed_and_its_target_replaced(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.pth").write_bytes(b"old")
    (tmp_path / "model.pth").symlink_to("real.pth")
    assert run_main("a06_save_load.py", [], capsys)[0] == 0
    assert (tmp_path / "model.pth").is_symlink()
    assert torch.load(tmp_path / "real.pth", weights_only=True).keys() == \
        NeuralNetwork(2, 2).state_dict().keys()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pth", "real.pth"]


def test_a_diverged_run_never_replaces_a_saved_model(tmp_path, monkeypatch, capsys):
    """A learner's lr=1e30: the loss prints as nan (they should see it), and the saved model
    stays as it was, with one line saying why."""
    copy = copy_of("a06_save_load.py", tmp_path, {"lr=0.5)": "lr=1e30)"})
    torch.save(NeuralNetwork(2, 2).state_dict(), tmp_path / "model.pth")
    before = (tmp_path / "model.pth").read_bytes()
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(str(copy), [], capsys)
    assert code == 1
    assert "Train/Val Loss: nan" in out and "Saved" not in out
    assert err == ("error: the model's weights are no longer finite numbers (the loss diverged: "
                   "is the learning rate too large?), so nothing was written to model.pth\n")
    assert (tmp_path / "model.pth").read_bytes() == before
