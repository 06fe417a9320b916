"""a08's --snapshot PATH (our addition: the tutorial's script cannot resume). After every
epoch rank 0 writes model, optimizer, the number of epochs completed and the settings that
define the run, atomically. At start rank 0 reads the file if it exists and broadcasts it, so
every process resumes from the same state even where the other machines cannot see the file.
While a run uses a snapshot it holds a lock beside it, so that a second run on the same file
stops at once instead of continuing the first one's training and overwriting it in turn."""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Iterator
from typing import IO, Any

from common import toy_data
from common.ending import remove_if_stopped
from common.extras.checkpoint import CheckpointError, atomic_path, explain_checkpoint_errors
from common.extras.errors import require_finite_loss
from common.extras.reporting import process_name, unwrap

import torch
import torch.distributed as dist

try:
    import fcntl
except ImportError:  # Windows: no lock, the rest works
    fcntl = None


class TrainingRecord:
    """What a08 adds around section 7's loop, made right before it in every process
    (collective): rank 0 describes the run; it resumes from --snapshot where the settings match;
    the clock starts. ``epochs`` gives the epochs left, saving the snapshot after each; ``keep``
    keeps each loss (for --plot and the summary) and stops a diverged run."""

    def __init__(self, args: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        if dist.get_rank() == 0:
            print(f"Processes: {dist.get_world_size()}, training on {device.type} "
                  f"with the {dist.get_backend()} backend")
        self.path = args.snapshot
        self.model = unwrap(model)  # its state_dict without DDP's "module." prefix
        self.optimizer = optimizer
        # what a resumed run must share: each setting that changes what it computes
        self.settings = _same_when_default({
            "--lr": args.lr, "--batch-size": args.batch_size, "--seed": args.seed,
            "--num-samples": args.num_samples, "--amp": args.amp})
        completed = self._restore()
        self.on_disk = completed  # the epochs that the snapshot holds
        self.first_epoch = min(completed, args.epochs)
        name = process_name(device)
        if completed and self.first_epoch < args.epochs:
            print(f"{name} Resuming from epoch {self.first_epoch} ({self.path}): continuing "
                  f"with epoch {self.first_epoch + 1}")
        elif completed:
            print(f"{name} {self.path} holds {completed} finished epochs, all that --epochs "
                  f"{args.epochs} asks for: nothing left to train (a larger --epochs trains on)")
        self.losses: list[float] = []
        self.seconds: float | None = None
        dist.barrier()  # the clock: from when all are ready to when the slowest is done
        self.start = time.perf_counter()

    def epochs(self, num_epochs: int) -> Iterator[int]:
        for epoch in range(self.first_epoch, num_epochs):
            yield epoch
            self.save(epochs_completed=epoch + 1)
            self.on_disk = epoch + 1
        dist.barrier()
        self.seconds = time.perf_counter() - self.start

    def keep(self, loss: torch.Tensor) -> None:
        self.losses.append(loss.item())
        if self.path is None or not self.on_disk:
            require_finite_loss(self.losses[-1])
        else:  # the snapshot is whole, but from this --lr: advice that the next run accepts
            require_finite_loss(self.losses[-1], kept=(
                f"{self.path} keeps the {self.on_disk} epoch(s) before, made with --lr "
                f"{self.settings['--lr']}: for a smaller --lr, give another --snapshot path "
                f"(or move {self.path} away)"))

    def save(self, epochs_completed: int) -> None:
        """Rank 0 writes the snapshot (no-op without --snapshot)."""
        if self.path is None or dist.get_rank() != 0:
            return
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "epochs_completed": epochs_completed, "settings": self.settings}
        with atomic_path(self.path, "--snapshot") as tmp:
            torch.save(state, tmp)

    def _restore(self) -> int:
        """Load the snapshot on every process; the number of epochs it completed, or 0."""
        if self.path is None:
            return 0
        payload: dict | str | None = None
        if dist.get_rank() == 0:
            payload = self._lock_and_read()
        shared = [payload]
        dist.broadcast_object_list(shared, src=0)
        payload = shared[0]
        if isinstance(payload, str):  # every process stops with rank 0's message
            raise CheckpointError(payload)
        if payload is None:
            return 0
        fresh = self.optimizer.state_dict()["param_groups"]
        try:
            self.model.load_state_dict(payload["model"])
            self.optimizer.load_state_dict(payload["optimizer"])
            _check_like(fresh, self.optimizer.state_dict()["param_groups"])
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError,
                IndexError) as err:
            raise CheckpointError(f"{self.path}: does not fit this model or optimizer "
                                  f"({type(err).__name__}); move it away to start afresh") from None
        return payload["epochs_completed"]

    def _lock_and_read(self) -> dict | str | None:
        """Rank 0: the snapshot, None where there is none yet, or why it cannot be used."""
        if problem := self._take_lock():
            return problem
        if not os.path.exists(self.path):
            return None
        try:
            with explain_checkpoint_errors(self.path):
                payload = torch.load(self.path, map_location="cpu", weights_only=True)
        except CheckpointError as err:
            return str(err)
        if not _written_by_a08(payload):  # crafted, or another program's
            return f"{self.path}: not an a08 snapshot; move it away or pick another --snapshot path"
        saved = _same_when_default(payload.get("settings", {}))
        differ = [_difference(flag, saved[flag], value) for flag, value in
                  self.settings.items() if flag in saved and saved[flag] != value]
        if differ:
            return (f"{self.path} was made with {', '.join(differ)}: resume with its settings, "
                    f"or move it away to start afresh (the number of processes may change)")
        return payload

    def _take_lock(self) -> str | None:
        """An exclusive lock on a file beside the snapshot while this record lives (the system
        releases it even after kill -9: a crashed run never blocks the next); None, or why not."""
        if fcntl is None:
            return None
        folder, name = os.path.split(os.path.abspath(self.path))
        path = os.path.join(folder, f".{name}.lock")
        try:
            lock = open(path, "a")  # noqa: SIM115
        except OSError as err:  # e.g. left by another user's run, in a shared folder
            return (f"{path}: cannot open the snapshot's lock file ({err.strerror}); remove "
                    f"it, or give another --snapshot path")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return (f"{self.path}: another run is using this snapshot; wait for it to end, "
                    f"or give this one another --snapshot path")
        stop = contextlib.ExitStack()  # a signal ends the run at once: the file goes then
        stop.enter_context(remove_if_stopped(path))
        weakref.finalize(self, _release, lock, path, stop)
        return None


def _written_by_a08(payload: Any) -> bool:
    """The fields a08 writes, of the types it writes them in (torch.load has checked that
    there is nothing but tensors and plain values)."""
    return (isinstance(payload, dict) and type(payload.get("epochs_completed")) is int
            and payload["epochs_completed"] >= 0
            and all(isinstance(payload.get(key), dict) for key in ("model", "optimizer"))
            and isinstance(payload.get("settings", {}), dict))


def _same_when_default(settings: dict) -> dict:
    """The settings with a flag left out written as its default where that is one value
    (--num-samples: the tutorial's 5 examples), so that naming the default changes nothing.
    A snapshot from before a setting was recorded is not held to it."""
    if "--num-samples" not in settings:
        return settings
    return settings | {"--num-samples": settings["--num-samples"] or len(toy_data()[1])}


def _check_like(fresh: list[dict], loaded: list[dict]) -> None:
    """The optimizer's loaded hyperparameters are numbers where this run's are (a crafted file
    could hold text where SGD computes with a number, failing deep inside a step)."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    for ours, theirs in zip(fresh, loaded, strict=True):
        if any(number(value) and not number(theirs.get(key, value))
               for key, value in ours.items()):
            raise TypeError("a hyperparameter that is no number")


def _difference(flag: str, saved: Any, asked: Any) -> str:
    """'--lr 0.5 (asked: 0.1)'; a flag left out (None) reads 'no --num-samples'."""
    return (f"{flag} {saved}" if saved is not None else f"no {flag}") + \
        f" (asked: {asked if asked is not None else 'no ' + flag})"


def _release(lock: IO[str], path: str, stop: contextlib.ExitStack) -> None:
    """Remove the lock file while still holding the lock, then let go of it."""
    with contextlib.suppress(OSError):
        os.remove(path)
    lock.close()
    stop.close()
