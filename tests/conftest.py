"""Shared helpers: run a script the way the README tells a user to, from a temporary folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_script(script: str, *args: str, cwd: Path, timeout: float = 120,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """`python <repo>/<script> args...` run in ``cwd``; output captured as text."""
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env())


def clean_env() -> dict:
    """The caller's environment without torchrun's variables (tests may run under anything)."""
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "TORCHELASTIC_RUN_ID"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def repo_litter() -> set[str]:
    """Checkpoint and image files lying in the repository, tracked, untracked or ignored."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return {line[3:] for line in out.splitlines()
            if line[3:].endswith((".pth", ".pt", ".png"))}


def section(out: str, title: str) -> str:
    """The text under the heading that starts with ``title``, up to the next heading."""
    start = out.index(f"=== {title}")
    end = out.find("\n=== ", start + 1)
    return out[start:] if end == -1 else out[start:end]


LITTER_AT_START = repo_litter()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run")


@pytest.fixture(scope="session")
def default_run(tmp_path_factory):
    """``default_run(script)``: the script's output with no flags, run once per test session."""
    cache: dict[str, subprocess.CompletedProcess] = {}

    def get(script: str) -> subprocess.CompletedProcess:
        if script not in cache:
            cache[script] = run_script(script, cwd=tmp_path_factory.mktemp(script[:3]))
        return cache[script]

    return get
