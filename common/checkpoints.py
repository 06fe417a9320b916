"""The files the companion writes itself, and a06's --load: ``atomic_path`` gives torch.save
a temporary file, renamed over the target once whole (a rename is atomic: the old file or the
new one, never half of one), for a08's --snapshot (and --plot); ``explain_load_errors`` turns a
file that torch.load or load_state_dict cannot use into one line saying why. The text's own
save in a06 is the text's line, as it writes it; only a diverged model (``require_finite``) is
kept from replacing a saved one."""

from __future__ import annotations

import contextlib
import os
import pickle
import platform
import stat
import tempfile
import time
import traceback
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.distributed as dist

from common.processes import leave_group
from common.runner import UserError, say_error, words

ROOT = Path(__file__).resolve().parent.parent  # the clone: the scripts and common/


def check_writable(path: str, flag: str) -> str | None:
    """Why ``path`` cannot be written as a file, or None: asked before any training."""
    target = Path(os.path.realpath(path))  # a symbolic link: its target gets written
    if target.exists() and not target.is_file():
        return f"{path} is {'a folder' if target.is_dir() else 'not a regular file'}; " \
               f"choose another {flag}"
    if platform.system() == "Windows" and target.is_file() and \
            not target.stat().st_mode & stat.S_IWRITE:  # Windows replaces no read-only file
        return f"{path} is read-only; make it writable (its Properties), or choose another {flag}"
    try:
        # named as atomic_path's, whose next save removes it where a signal left it
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".tmp"):
            pass
    except OSError as err:
        return f"{path}: cannot write there ({err.strerror}); choose another {flag}"
    return None


@contextmanager
def atomic_path(path: str, flag: str) -> Iterator[str]:
    """A temporary path beside ``path`` for the block to write, then moved over it (tried
    again for two seconds where another program holds ``path``: on Windows an antivirus,
    OneDrive or an editor). What a signal left half-written earlier is removed first."""
    if problem := check_writable(path, flag):
        raise UserError(problem)
    target = Path(os.path.realpath(path))
    for leftover in target.parent.glob(f".{target.name}.*.tmp"):
        leftover.unlink(missing_ok=True)
    handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(handle)
    tmp = Path(tmp)
    umask = os.umask(0o22)
    os.umask(umask)
    try:
        yield str(tmp)
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())  # on disk before the rename makes it the file
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private: a saved file's mode
        for wait in [0.2] * 9 + [None]:
            try:
                os.replace(tmp, target)
                break
            except PermissionError as err:
                if wait is None:
                    raise UserError(f"{path}: cannot replace it ({err.strerror}): another "
                                    f"program may hold the file (an antivirus, OneDrive, an "
                                    f"editor); close it, or choose another {flag}") from None
                time.sleep(wait)
    except (OSError, RuntimeError) as err:  # torch.save: RuntimeError "... failed writing"
        raise UserError(f"{path}: cannot write it ({words(err)}); choose another {flag}, or "
                        f"free some space") from None
    finally:
        with contextlib.suppress(OSError):  # Windows: a scanner may hold it a while longer
            tmp.unlink(missing_ok=True)


@contextmanager
def explain_load_errors(path: str) -> Iterator[None]:
    """One line for a file that cannot be used; an error in the scripts' lines: a traceback."""
    try:
        if os.path.isdir(path):  # asked: Windows' open() says only "Permission denied"
            raise UserError(f"{path}: a folder, not a saved file; check the path")
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise UserError(f"{path}: the file is empty (an interrupted save?); save it again")
        yield
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; check the path, or train and save first") \
            from None
    except (IsADirectoryError, PermissionError) as err:
        raise UserError(f"{path}: cannot read it ({err.strerror})") from None
    except Exception as err:
        if Path(traceback.extract_tb(err.__traceback__)[-1].filename).resolve().parent in (
                ROOT, ROOT / "common"):
            raise  # a line of the scripts or of common/, one the learner edited
        raise UserError(f"{path}: {why_unusable(path, err)}") from None


def why_unusable(path: str, err: Exception) -> str:
    """What the file holds, by its first bytes, else read again onto the CPU, noting where its
    tensors were saved."""
    if kind := not_a_checkpoint(path):
        return kind
    devices = set()

    def on_the_cpu(storage, location):
        devices.add(location.split(":")[0])
        return storage

    try:
        content = torch.load(path, map_location=on_the_cpu, weights_only=True)
    except pickle.UnpicklingError:  # weights_only's refusal (torch < 2.4: of devices too)
        return ("refused: it holds Python objects, not only tensors, and loading it could run "
                "code; load such files only from sources you trust (weights_only=False)")
    except Exception as again:
        return f"not a checkpoint torch can read ({words(again)}); save it again"
    keys = list(content) if isinstance(content, dict) else []
    if devices - {"cpu"} and not str(err).startswith("Error(s) in loading"):
        return (f"saved on {'/'.join(sorted(devices - {'cpu'}))}, which this machine lacks; "
                f"torch.load(PATH, map_location='cpu', weights_only=True) loads it onto the CPU")
    if prefix := wrapper_prefix(keys):
        wrapper, instead = WRAPPERS[prefix]
        return (f"saved from a {wrapper} model (keys start with {prefix!r}); {instead}load it "
                f"into the model with torch.nn.modules.utils."
                f"consume_prefix_in_state_dict_if_present(state_dict, {prefix!r}) first")
    if key := next((key for key in ("model", "model_state_dict") if key in keys), None):
        return (f"a checkpoint that holds more than the model; its weights are under "
                f"{key!r}: model.load_state_dict(torch.load(PATH)[{key!r}])")
    lines = str(err).strip().splitlines()  # load_state_dict's first mismatch, or its words
    return f"does not fit this model ({(lines[1:] or lines)[0].strip()[:160]})"


def not_a_checkpoint(path: str) -> str | None:
    """What a file holds that torch.save did not write whole, and what to do, from its first
    bytes; None where they are torch.save's (a zip archive, whole) or a pickle. torch's
    weights-only loader rejects each of these with "Unsupported operand", its refusal of Python
    objects (pytorch#150998: a Git LFS pointer's 'v'; an HTML page's '<')."""
    with open(path, "rb") as file:
        head = file.read(1024)
    if head.startswith(b"PK\x03\x04"):  # a zip archive, as torch.save writes: whole if it ends
        return None if zipfile.is_zipfile(path) else (
            "cut short (a zip archive without its end: a download or a save that stopped "
            "midway); download or save it again")
    if head.startswith(b"version https://git-lfs"):
        return ("a Git LFS pointer, not the file itself (a clone made without Git LFS); run "
                "git lfs pull in that clone, or download the file itself")
    if len(head) > 9 and head[8:10] in (b'{"', b"{ ") and \
            int.from_bytes(head[:8], "little") < os.path.getsize(path):  # its header's length
        return ("a safetensors file, not torch.save's: model.load_state_dict(safetensors.torch."
                "load_file(PATH)) loads it (pip install safetensors)")
    if head.lstrip().lower().startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
        return ("a web page (HTML), not a checkpoint: the link gave a page, not the file; "
                "download the file itself")
    if head and all(byte >= 32 or byte in b"\t\n\r" for byte in head):  # no pickle's bytes
        return "a text file, not a checkpoint; check the path"
    return None


# The prefix a wrapper puts before every key of its model's state_dict: the wrapper, and how
# to save the model without it
WRAPPERS = {"module.": ("DistributedDataParallel", ""),
            "_orig_mod.": ("torch.compile", "save model._orig_mod.state_dict() instead, or ")}


def wrapper_prefix(keys: list) -> str | None:
    """The WRAPPERS prefix every key starts with, or None."""
    return next((prefix for prefix in WRAPPERS
                 if keys and all(str(key).startswith(prefix) for key in keys)), None)


def require_finite(state_dict: dict, path: str) -> None:
    """Weights that became NaN or infinite (a learning rate too large: the loss printed nan)
    are never written over ``path``."""
    if not all(torch.isfinite(tensor).all() for tensor in state_dict.values()
               if torch.is_tensor(tensor) and tensor.is_floating_point()):
        raise UserError(f"the model's weights are no longer finite numbers (the loss diverged: "
                        f"is the learning rate too large?), so nothing was written to {path}")


@dataclass
class Snapshot:
    """a08's --snapshot: what a run needs to go on (the number of processes may change), and
    what tells whether the script that resumes it still fits (older snapshots lack the
    optimizer's name: they resume where the model fits)."""
    model: dict
    optimizer: dict
    epochs_completed: int
    optimizer_class: str | None = None

    def save(self, path: str) -> None:
        require_finite(self.model, path)
        with atomic_path(path, "--snapshot") as tmp:
            torch.save(vars(self), tmp)

    @classmethod
    def load(cls, path: str) -> Snapshot:
        with explain_load_errors(path):
            content = torch.load(path, map_location="cpu", weights_only=True)
        names = {f.name for f in fields(cls)}
        required = names - {"optimizer_class"}  # older snapshots lack it
        if not isinstance(content, dict) or not required <= set(content) <= names:
            raise UserError(f"{path}: not an a08 snapshot; move it away, or give another "
                            f"--snapshot")
        return cls(**content)

    def misfit(self, model: torch.nn.Module, optimizer) -> str | None:
        """What the script edited since this snapshot was written, or None where it fits."""
        saved = {name: tuple(tensor.shape) for name, tensor in self.model.items()}
        now = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
        prefixes = wrapper_prefix(list(saved)), wrapper_prefix(list(now))
        if prefixes[0] != prefixes[1]:  # torch.compile added or taken away since
            prefix = prefixes[1] or prefixes[0]
            return (f"{'this script' if prefixes[1] else 'the snapshot'}'s model is wrapped by "
                    f"{WRAPPERS[prefix][0]}, its keys starting with {prefix!r}, the "
                    f"{'snapshot' if prefixes[1] else 'script'}'s not")
        if saved != now:
            name = next(n for n in [*now, *saved] if saved.get(n) != now.get(n))
            return (f"the model's {name} is {saved.get(name, 'missing')} in the snapshot, "
                    f"{now.get(name, 'missing')} in this script")
        if self.optimizer_class not in (None, type(optimizer).__name__):
            return (f"it was written by torch.optim.{self.optimizer_class}, this script uses "
                    f"torch.optim.{type(optimizer).__name__}")
        return None


def save_snapshot(path: str | None, model: torch.nn.Module, optimizer, epochs_completed: int,
                  rank: int) -> None:
    """At the end of an epoch: rank 0 saves --snapshot (without one: nothing)."""
    if path and rank == 0:
        Snapshot(model.state_dict(), optimizer.state_dict(), epochs_completed,
                 type(optimizer).__name__).save(path)


def resume(path: str | None, model: torch.nn.Module, optimizer, num_epochs: int,
           rank: int) -> int:
    """Before DDP(...): rank 0 reads --snapshot and hands it to every process (other machines
    need not see the file); the epochs it holds, 0 without one. The optimizer's state holds
    the learning rate too: the one the snapshot's run used, which the run goes on with. A
    file that cannot be resumed: rank 0's one line (before the others hear of it, so that no
    launcher ends it first), then every process leaves the group and exits with 1."""
    snapshot = None
    if path and rank == 0 and os.path.exists(path):
        try:
            snapshot = Snapshot.load(path)
            if misfit := snapshot.misfit(model, optimizer):
                raise UserError(f"{path} does not fit this script ({misfit}): give another "
                                f"--snapshot path, or delete {path} to start afresh")
        except UserError as err:
            snapshot = str(err)
            say_error(snapshot)
    shared = [snapshot]
    dist.broadcast_object_list(shared, src=0)
    if isinstance(shared[0], str):
        leave_group()
        raise SystemExit(1)
    if shared[0] is None:
        return 0
    model.load_state_dict(shared[0].model)
    optimizer.load_state_dict(shared[0].optimizer)
    done = shared[0].epochs_completed
    if rank == 0:
        print(f"Resuming from epoch {done} ({path}): continuing with epoch {done + 1} at the "
              f"snapshot's lr={optimizer.param_groups[0]['lr']:g}" if done < num_epochs else
              f"{path} holds {done} finished epochs, all that num_epochs = {num_epochs} asks "
              f"for: nothing left to train (a larger num_epochs trains on)")
    return done
