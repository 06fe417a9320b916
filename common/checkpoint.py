"""Saving and loading checkpoints so that no file is ever half-written or unsafe to open.

Our addition to section 8: torch.save straight to the target leaves a truncated file if the
process dies mid-write, and loading a file someone else made can run code. Here a save goes to a
temporary file in the same folder and is renamed over the target only when complete (a rename is
atomic on the same file system), and a load never unpickles code (``weights_only=True``) and turns
every way a file can be wrong into one ``CheckpointError`` with a one-line message.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message says which problem and what to do."""


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """torch.save ``obj`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp_name, 0o666 & ~_current_umask())  # as open() would, not mkstemp's 0600
        with os.fdopen(fd, "wb") as tmp:
            torch.save(obj, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def safe_load(path: str | os.PathLike) -> Any:
    """torch.load with ``weights_only=True``; any unusable file raises CheckpointError."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file; check the path, or train and save first")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a folder; give the path of a checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: the file is empty (an interrupted save?); save it again")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "global" not in str(err).lower():  # garbage, not a pickle that names code
            raise CheckpointError(f"{path}: not a PyTorch checkpoint; give a file saved "
                                  f"with torch.save") from None
        raise CheckpointError(
            f"{path}: refused: it holds Python objects, not just tensors, and unpickling it "
            f"could run code; only load whole pickled objects from sources you trust"
        ) from None
    except Exception as err:  # a damaged file can fail in many ways deep inside torch.load
        kind = "truncated or corrupt" if _looks_like_zip(path) else "not a PyTorch checkpoint"
        raise CheckpointError(
            f"{path}: {kind} ({type(err).__name__}); save the checkpoint again"
        ) from None


def load_state_dict_into(model: torch.nn.Module, path: str | os.PathLike) -> str:
    """Load a state_dict from ``path`` into ``model``; returns load_state_dict's report."""
    state = safe_load(path)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor)
                                              for v in state.values()):
        raise CheckpointError(f"{path}: holds no model state_dict; give a file saved "
                              f"with torch.save(model.state_dict(), PATH)")
    try:
        return str(model.load_state_dict(state))
    except RuntimeError as err:
        raise CheckpointError(
            f"{path}: saved from another architecture, it does not fit "
            f"{type(model).__name__} ({_first_mismatch(str(err))}); retrain and save again"
        ) from None


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
