"""summary.json is written whenever the launcher can write at all.

At start the launcher reserves the file: a placeholder padded with spaces
(trailing whitespace is valid JSON) to RESERVED_BYTES. At the end the summary
is written atomically as usual; if that fails because the disk is full, it is
written over the reserved bytes in place, which needs no new space. A summary
larger than the reservation, or a filesystem that refuses writes altogether,
is reported as a one-line reason instead.
"""
from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Optional

from psgd.orchestrate.states import RunStatus
from psgd.runtime.files import atomic_write
from psgd.runtime.safe_io import describe_os_error

__all__ = ["reserve_summary", "write_summary", "RESERVED_BYTES"]

RESERVED_BYTES = 64 * 1024


def reserve_summary(path: Path) -> None:
    """Hold RESERVED_BYTES for the final summary (status "running" until then).
    Raises OSError."""
    text = json.dumps({"status": str(RunStatus.RUNNING)})
    atomic_write(path, text + " " * (RESERVED_BYTES - len(text) - 1) + "\n")


def write_summary(path: Path, summary: dict) -> Optional[str]:
    """Write the final summary; returns None, or a one-line reason it could not be written."""
    text = json.dumps(summary, indent=2)
    try:
        atomic_write(path, text)
        return None
    except OSError as exc:
        first = describe_os_error(exc, path)
    try:
        if len(text) + 1 > path.stat().st_size:
            return f"{first} (and the {path.stat().st_size}-byte reservation is too small)"
        with open(path, "r+") as f:  # over the reserved bytes: no new blocks needed
            f.write(text + " " * (path.stat().st_size - len(text) - 1) + "\n")
        return None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return str(first)
        return str(describe_os_error(exc, path))
