"""How a08's processes are started: torchrun's variables, read and checked in one place, and
the torchrun command line (no torch here: the walkthrough imports this)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from common.extras.errors import UserError


class LaunchError(UserError):
    """A launch variable missing, malformed or inconsistent: each process says so of its own."""

    every_process = True


@dataclass(frozen=True)
class Launch:
    """Who this process is among how many: ``rank`` is unique across machines, ``local_rank``
    picks the GPU on this machine."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master: tuple[str, int] | None = None  # MASTER_ADDR, MASTER_PORT, where they meet
    spawn: int | None = None  # --spawn N: this process starts N workers instead of training

    @property
    def launched(self) -> bool:
        """Started by torchrun or --spawn (else: one plain process)."""
        return self.master is not None


def read_launch(environ: Mapping[str, str] = os.environ) -> Launch:
    """The launcher's variables, checked before anything waits on them: one line naming what
    to set (RANK without WORLD_SIZE, say)."""
    if "RANK" not in environ and "WORLD_SIZE" not in environ:
        return Launch()  # one plain process
    for name in ("RANK", "WORLD_SIZE"):
        if name not in environ:
            raise LaunchError(f"{'RANK' if name == 'WORLD_SIZE' else 'WORLD_SIZE'} is set but "
                              f"{name} is not; set both (RANK from 0 to WORLD_SIZE-1, one per "
                              f"process), or start a08 with torchrun, which sets them")
    world_size = _whole_number(environ, "WORLD_SIZE", 1, None)
    rank = _whole_number(environ, "RANK", 0, world_size - 1)
    local_world_size = _whole_number(environ, "LOCAL_WORLD_SIZE", 1, world_size,
                                     default=world_size)
    local_rank = _whole_number(environ, "LOCAL_RANK", 0, local_world_size - 1,
                               default=rank if local_world_size == world_size else None)
    address = environ.get("MASTER_ADDR", "").strip()
    if not address:
        raise LaunchError("RANK and WORLD_SIZE are set but MASTER_ADDR is not: set it to the "
                          "address of the machine of process 0 (and MASTER_PORT), or start a08 "
                          "with torchrun, which sets all of them")
    port = _whole_number(environ, "MASTER_PORT", 1, 65535)
    return Launch(rank, local_rank, world_size, local_world_size, master=(address, port))


def _whole_number(environ: Mapping[str, str], name: str, low: int, high: int | None,
                  default: int | None = None) -> int:
    text = environ.get(name)
    if text is None:
        if default is None:
            raise LaunchError(f"{name} is not set; set it ({_range(low, high)}), or start a08 "
                              f"with torchrun, which sets it")
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise LaunchError(f"{name}={text!r} is not {_range(low, high)}; fix it, or start a08 "
                          f"with torchrun, which sets it")
    return value


def _range(low: int, high: int | None) -> str:
    if high is None:
        return f"a whole number >= {low}"
    return f"a whole number from {low} to {high}" if high > low else f"{low}"


def launch_for_messages(environ: Mapping[str, str] = os.environ) -> Launch:
    """``read_launch()``, or a plain process's where the variables are broken: for who speaks
    and what a message names, never for training."""
    try:
        return read_launch(environ)
    except LaunchError:
        return Launch()


def is_first_process(environ: Mapping[str, str] = os.environ) -> bool:
    """Rank 0, or one plain process; every process where the variables are broken."""
    return launch_for_messages(environ).rank == 0


def torchrun_command(nproc: int | str, script: str, *args: str,
                     launcher_args: tuple[str, ...] = ("--standalone",)) -> list[str]:
    """``torchrun --nproc_per_node=N [launcher_args] script args...`` run by this Python
    (``-m torch.distributed.run``: torchrun, not needed on the PATH)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
            *launcher_args, script, *args]
