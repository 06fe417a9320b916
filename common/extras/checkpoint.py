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

import os
import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from common.extras.errors import UserError


class CheckpointError(UserError):
    """A checkpoint that cannot be written or used; the message says which and what to do."""


@contextmanager
def atomic_path(path: str | os.PathLike, flag: str = "--path") -> Iterator[str]:
    """Yield a temporary path beside ``path``; once the block has written it, move it over
    ``path`` in one step. If the block fails, ``path`` is untouched and the temporary file gone.
    ``flag`` names the option that chose ``path``, for the error message."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # a folder that does not exist or cannot be written
        raise _cannot_write(path, err, flag) from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_current_umask())  # as open() would, not mkstemp's 0600
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())  # on disk before the rename makes it the checkpoint
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):  # e.g. the disk filled up while writing
            raise _cannot_write(path, err, flag) from None
        raise


@contextmanager
def explain_checkpoint_errors(path: str | os.PathLike) -> Iterator[None]:
    """Around ``torch.load(path, ...)`` and ``load_state_dict``: a missing, empty, damaged,
    foreign or unsafe file, or one from another architecture, becomes one CheckpointError."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file; check the path, or train and save first")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a folder; give the path of a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty (an interrupted save?); save it again")
    try:
        yield
    except pickle.UnpicklingError as err:
        if "global" not in str(err).lower():  # garbage, not a pickle that names code
            raise CheckpointError(f"{path}: not a PyTorch checkpoint; give a file saved "
                                  f"with torch.save") from None
        raise CheckpointError(
            f"{path}: refused: it holds Python objects, not just tensors, and unpickling it "
            f"could run code; only load whole pickled objects from sources you trust"
        ) from None
    except Exception as err:
        message = str(err)
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


def safe_load(path: str | os.PathLike) -> Any:
    """torch.load with ``weights_only=True``, onto the CPU; any unusable file raises
    CheckpointError."""
    with explain_checkpoint_errors(path):
        return torch.load(path, map_location="cpu", weights_only=True)


def _cannot_write(path: Path, err: OSError, flag: str) -> CheckpointError:
    return CheckpointError(f"{path}: cannot write it ({err.strerror}); choose another {flag}")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _looks_like_zip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _first_mismatch(message: str) -> str:
    lines = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    return (lines[0] if lines else message.splitlines()[0])[:160]
