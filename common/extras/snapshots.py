"""a08's --snapshot PATH (our addition: the tutorial's script cannot resume). After every
epoch rank 0 writes model, optimizer and the number of epochs completed, atomically. At start
rank 0 reads the file if it exists and broadcasts it, so every process resumes from the same
state even where the other machines cannot see the file."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from common.extras.checkpoint import CheckpointError, atomic_path, safe_load
from common.extras.reporting import process_name, unwrap


class Snapshot:
    """Create it right before training, in every process (restoring is collective).
    ``first_epoch`` is where training starts: 0 without a snapshot to resume from."""

    def __init__(self, path: str | None, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        self.path = path
        self.model = unwrap(model)  # its state_dict without DDP's "module." prefix
        self.optimizer = optimizer
        self.first_epoch = self._restore()
        if self.first_epoch:
            device = next(self.model.parameters()).device
            print(f"{process_name(device)} Resuming from epoch {self.first_epoch} ({self.path}): "
                  f"continuing with epoch {self.first_epoch + 1}")

    def save(self, epochs_completed: int) -> None:
        """Rank 0 writes the snapshot (no-op without --snapshot)."""
        if self.path is None or dist.get_rank() != 0:
            return
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "epochs_completed": epochs_completed}
        with atomic_path(self.path, "--snapshot path") as tmp:
            torch.save(state, tmp)

    def _restore(self) -> int:
        """Load the snapshot on every process; the number of epochs it completed, or 0."""
        if self.path is None:
            return 0
        payload: dict | str | None = None
        if dist.get_rank() == 0 and os.path.exists(self.path):
            try:
                payload = safe_load(self.path)
                if not isinstance(payload, dict) or "epochs_completed" not in payload:
                    payload = (f"{self.path}: not an a08 snapshot; move it away or pick "
                               f"another --snapshot path")
            except CheckpointError as err:  # every process stops with rank 0's message
                payload = str(err)
        shared = [payload]
        dist.broadcast_object_list(shared, src=0)
        payload = shared[0]
        if isinstance(payload, str):
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
