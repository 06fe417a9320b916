"""a08's training progress: resuming, snapshots, thinner logs and the training time (our
additions; the tutorial's script cannot resume and prints every batch).

- ``--snapshot PATH``: after every epoch rank 0 writes model, optimizer and the number of epochs
  completed, atomically. At start rank 0 reads the file if it exists and broadcasts it, so every
  process resumes from the same state even where the other machines cannot see the file.
- ``--log-every K``: a loss line for every K-th batch only.
- The training time and samples/s over all processes, printed by rank 0 after the last epoch.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from common.extras.checkpoint import CheckpointError, atomic_path, safe_load
from common.extras.distributed import process_name


class Progress:
    """Create it right before training, in every process (restoring is collective).
    ``first_epoch`` is where training starts: 0 without a snapshot. The clock starts here."""

    def __init__(self, args: argparse.Namespace, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, train_loader: DataLoader) -> None:
        self.path = args.snapshot
        self.epochs = args.epochs
        self.log_every = args.log_every
        self.model = getattr(model, "module", model)  # the bare model, not the DDP wrapper
        self.optimizer = optimizer
        self.first_epoch = self._restore()
        if self.first_epoch:
            device = next(self.model.parameters()).device
            print(f"{process_name(device)} Resuming from epoch {self.first_epoch} ({self.path}): "
                  f"continuing with epoch {self.first_epoch + 1}")
        self.samples = ((self.epochs - self.first_epoch) * len(train_loader) * args.batch_size
                        * dist.get_world_size())  # over all processes, until the last epoch
        dist.barrier()  # all processes start the clock together
        self.start = time.perf_counter()

    def logs(self, batch_idx: int) -> bool:
        """Whether this batch gets a loss line (--log-every)."""
        return batch_idx % self.log_every == 0

    def epoch_done(self, epoch: int) -> None:
        """After epoch ``epoch`` (0-based): rank 0 writes the snapshot; after the last one, rank
        0 prints the training time and throughput of all processes together."""
        if self.path is not None and dist.get_rank() == 0:
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                     "epochs_completed": epoch + 1}
            with atomic_path(self.path, "--snapshot path") as tmp:
                torch.save(state, tmp)
        if epoch + 1 == self.epochs:
            self._report_time()

    def _report_time(self) -> None:
        dist.barrier()  # the time of the slowest process
        seconds = time.perf_counter() - self.start
        if dist.get_rank() == 0:
            print(f"Training time: {seconds:.3f} s for {self.samples} samples, "
                  f"{self.samples / seconds:.0f} samples/s over all processes "
                  f"(start-up excluded)")

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
