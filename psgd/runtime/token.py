"""The run token: a secret in the run directory that live control and SHUTDOWN must carry.

Whoever can read the run directory may steer the run; nobody else can, even
with network access to a shard. The file is created 0600 (never world-readable,
not even for a moment).
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

from psgd.runtime.files import atomic_write

__all__ = ["TOKEN_FILE", "new_run_token", "read_run_token"]

TOKEN_FILE = "run.token"


def new_run_token(run_dir: Path) -> str:
    """Create (or replace) the run's token file, mode 0600 from creation; returns the token."""
    token = secrets.token_hex(16)
    atomic_write(Path(run_dir) / TOKEN_FILE, token, fsync=False, mode=0o600)
    return token


def read_run_token(run_dir: Optional[Path]) -> Optional[str]:
    """The run's token, or None when there is no run directory or no token in it."""
    if run_dir is None:
        return None
    try:
        return (Path(run_dir) / TOKEN_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None
