"""Safe checkpoints: our addition to section 8, wrapped around the tutorial's own two lines.

``torch.save`` straight to the target leaves a truncated file if the process dies mid-write, and
a file that cannot be loaded fails deep inside torch with a long traceback. a06 keeps the text's
lines and puts these around them:

    with atomic_path(PATH) as tmp:             # torch.save writes a temporary file beside PATH,
        torch.save(model.state_dict(), tmp)    # renamed over PATH only once it is complete
    with explain_checkpoint_errors(PATH):      # any unusable file: one CheckpointError line
        model.load_state_dict(torch.load(PATH, weights_only=True))

A rename is atomic on one file system, so PATH always holds either the old file or the new one.
``weights_only=True`` (torch's default since 2.6) never unpickles code.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import secrets
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.ending import remove_if_stopped
from common.extras.errors import UserError
from common.startup import ROOT


class CheckpointError(UserError):
    """A checkpoint that cannot be written or used; the message says which and what to do."""


def check_writable(path: str | os.PathLike, flag: str) -> str | None:
    """Why ``path`` cannot be written as a file (no such folder, read-only, name too long, not
    a regular file there), or None: asked before any work, so a bad path costs no training."""
    target = Path(os.path.realpath(path))  # a symbolic link: its target is what gets written
    if str(path).endswith(tuple(filter(None, (os.sep, os.altsep)))):
        return f"{path} names a folder (it ends with {str(path)[-1]}); give the path of a file"
    try:
        if target.exists() and not target.is_file():
            kind = "a folder" if target.is_dir() else "not a regular file"
            return f"{path} is {kind}; give the path of a file to write"
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=_temporary_prefix(target)):
            pass
        if len(target.name.encode()) > _longest_name(target.parent):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
    except OSError as err:
        return f"{path}: cannot write it ({err.strerror}); choose another {flag}"
    return None


def _temporary_prefix(target: Path) -> str:
    """Short enough that the temporary name is never too long where the target's name fits."""
    return f".{target.name[:32]}."


def _longest_name(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # Windows has no pathconf
        return 255


@contextmanager
def atomic_path(path: str | os.PathLike, flag: str = "--path") -> Iterator[str]:
    """A temporary path beside ``path``, moved over it in one step once the block has written
    it; if the block fails, ``path`` is untouched and the temporary file gone. A symbolic link's
    target is replaced. ``flag``: the option that chose ``path``, for the error message."""
    problem = check_writable(path, flag)
    if problem:
        raise CheckpointError(problem)
    target = Path(os.path.realpath(path))
    # named before it is made, so that a signal at any moment finds it on ending's list
    tmp = str(target.parent / f"{_temporary_prefix(target)}{secrets.token_hex(4)}.tmp")
    with remove_if_stopped(tmp):
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # as open()
            yield tmp
            with open(tmp, "rb+") as written:
                os.fsync(written.fileno())  # on disk before the rename makes it the checkpoint
            os.replace(tmp, target)
        except BaseException as err:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(err, OSError) or "failed writing" in str(err):  # e.g. a full disk
                reason = err.strerror if isinstance(err, OSError) else str(err).splitlines()[0]
                raise CheckpointError(f"{path}: cannot write it ({reason}); choose another "
                                      f"{flag}, or free some space") from None
            raise


@contextmanager
def explain_checkpoint_errors(path: str | os.PathLike) -> Iterator[None]:
    """Around ``torch.load(path, ...)`` and ``load_state_dict``: a missing, empty, damaged,
    foreign or unsafe file, or one from another architecture, becomes one CheckpointError."""
    path = Path(path)
    try:
        if not path.exists():
            raise CheckpointError(f"{path}: no such file; check the path, or train and save "
                                  f"first")
        if path.is_dir():
            raise CheckpointError(f"{path}: is a folder; give the path of a checkpoint file")
        if path.stat().st_size == 0:
            raise CheckpointError(f"{path}: the file is empty (an interrupted save?); save it "
                                  f"again")
        with open(path, "rb"):  # unreadable: say so, rather than "not a checkpoint"
            pass
        damaged = _damaged_member(path)
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read it ({err.strerror})") from None
    if damaged:  # torch.load does not check the zip's checksums: it would load wrong numbers
        raise CheckpointError(f"{path}: damaged ({damaged} does not match its checksum); save "
                              f"the checkpoint again")
    try:
        yield
    except pickle.UnpicklingError as err:  # torch before 2.4 wraps the device's error so
        if saved_elsewhere := _saved_on_a_device_not_here(path, str(err)):
            raise saved_elsewhere from None
        if not any(sign in str(err) for sign in ("global", "GLOBAL", "Unsupported class")):
            # garbage, not a pickle that names code (torch 2.2 says "Unsupported class")
            raise CheckpointError(f"{path}: not a PyTorch checkpoint; give a file saved "
                                  f"with torch.save") from None
        raise CheckpointError(
            f"{path}: refused: it holds Python objects, not just tensors, and unpickling it "
            f"could run code; only load whole pickled objects from sources you trust"
        ) from None
    except Exception as err:
        if _raised_by_the_learners_code(err):  # an edited line: its traceback is the help
            raise
        message = str(err)
        if saved_elsewhere := _saved_on_a_device_not_here(path, message):
            raise saved_elsewhere from None
        for sign, meaning in _KNOWN_LOAD_ERRORS:
            if sign in message:
                raise CheckpointError(f"{path}: {meaning}") from None
        if "Error(s) in loading state_dict" in message:  # load_state_dict: keys, shapes differ
            raise CheckpointError(
                f"{path}: saved from another architecture, it does not fit the model "
                f"({_first_mismatch(message)}); retrain and save again") from None
        if isinstance(err, TypeError) and "state_dict" in message:  # not a dict at all
            raise CheckpointError(f"{path}: holds no model state_dict; give a file saved "
                                  f"with torch.save(model.state_dict(), PATH)") from None
        # a damaged file can fail in many ways deep inside torch.load
        kind = "truncated or corrupt" if _looks_like_zip(path) else "not a PyTorch checkpoint"
        raise CheckpointError(f"{path}: {kind} ({type(err).__name__}); save the checkpoint "
                              f"again") from None


# A file's tensors remember the device they were saved from (Colab's GPU, a Mac's MPS), and
# torch.load puts them back there, or says in one of these ways that this machine has none.
_DEVICE_THE_FILE_NAMES = re.compile(
    r"Storage device not recognized: (\w+)|deserialize object on (?:a )?(\w+) device"
    r"|tagged with (\w+)|The (\w+) device module is not registered")
_DEVICE_NAMES = {"cuda": "a CUDA GPU", "mps": "Apple's GPU (MPS)", "xpu": "an Intel GPU (XPU)"}


def _saved_on_a_device_not_here(path: Path, message: str) -> CheckpointError | None:
    """The error for a file whose tensors name a device this machine lacks, as torch's
    ``message`` says, or None."""
    device = _DEVICE_THE_FILE_NAMES.search(message)
    if device is None:
        return None
    tag = next(filter(None, device.groups())).lower()
    return CheckpointError(f"{path}: saved on {_DEVICE_NAMES.get(tag, f'a device named {tag!r}')}"
                           f", and this machine has none; torch.load(PATH, map_location='cpu', "
                           f"weights_only=True) loads it onto the CPU")


_KNOWN_LOAD_ERRORS = [  # (a sign in torch's message, what it means and what to do)
    ('"model_state_dict"',  # PyTorch's recipe for a general checkpoint
     "a general checkpoint (epoch, optimizer, ...), not a model's state_dict; its weights are "
     "under 'model_state_dict': model.load_state_dict(torch.load(PATH)['model_state_dict'])"),
    ('"epochs_completed"',  # load_state_dict given a whole a08 snapshot
     "an a08 snapshot, not a model's state_dict; its model is under the key 'model' "
     "(torch.load(PATH)['model']), or save one with torch.save(model.state_dict(), PATH)"),
    ('Unexpected key(s) in state_dict: "module.',
     "saved from a DistributedDataParallel model, whose keys start with 'module.'; save "
     "model.module.state_dict() there instead, or strip the prefix with "
     "torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"),
]


def _raised_by_the_learners_code(err: Exception) -> bool:
    """Raised in a line of the scripts or of ``common`` (a mistyped name, a wrong argument),
    not inside torch.load or load_state_dict."""
    trace = err.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    if trace is None:
        return False
    where = Path(trace.tb_frame.f_code.co_filename).resolve().parent
    return where in (ROOT, ROOT / "common")


def _damaged_member(path: Path) -> str | None:
    """The first member of a zip-format checkpoint (torch.save's) whose bytes no longer match
    their checksum, or None (also for no whole zip: torch.load says what it is)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError):
        return None


def _looks_like_zip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _first_mismatch(message: str) -> str:
    lines = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    return (lines[0] if lines else message.splitlines()[0])[:160]
