"""Resuming a08 after a fault (our addition; the tutorial's script cannot resume).

After every epoch, rank 0 writes a snapshot (model, optimizer, epochs completed) atomically. At
start, rank 0 reads it if it exists and broadcasts it, so every process resumes from the same
state even where the other machines cannot see the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from common.checkpoint import CheckpointError, atomic_save, safe_load


class Snapshot:
    def __init__(self, path: str | os.PathLike | None, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, rank: int) -> None:
        self.path = Path(path) if path is not None else None
        self.model = model  # the bare model, not the DDP wrapper
        self.optimizer = optimizer
        self.rank = rank

    def restore(self) -> int:
        """Load the snapshot on every process; returns the number of epochs it completed
        (0 without one). Collective: every process must call it."""
        if self.path is None:
            return 0
        payload: dict | str | None = None
        if self.rank == 0 and self.path.exists():
            try:
                payload = safe_load(self.path)
                if not isinstance(payload, dict) or "epochs_completed" not in payload:
                    payload = f"{self.path}: not an a08 snapshot; move it away or pick " \
                              f"another --snapshot path"
            except CheckpointError as err:
                payload = str(err)
        shared = [payload]
        dist.broadcast_object_list(shared, src=0)
        payload = shared[0]
        if isinstance(payload, str):  # rank 0 could not use the file: all stop together
            raise CheckpointError(payload)
        if payload is None:
            return 0
        try:
            self.model.load_state_dict(payload["model"])
            self.optimizer.load_state_dict(payload["optimizer"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(f"{self.path}: does not fit this model or optimizer "
                                  f"({type(err).__name__}); move it away to start afresh") from None
        return int(payload["epochs_completed"])

    def save(self, epochs_completed: int) -> None:
        """Rank 0 writes the state after ``epochs_completed`` epochs; the others do nothing."""
        if self.path is None or self.rank != 0:
            return
        try:
            atomic_save({"model": self.model.state_dict(),
                         "optimizer": self.optimizer.state_dict(),
                         "epochs_completed": epochs_completed}, self.path)
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot write the snapshot "
                                  f"({err.strerror}); pick another --snapshot path") from None
