"""Writing run files so that a filesystem error is one clear line, not a traceback
and a half-written file.

`WriteFailed` names the path and the cause ("No space left on device",
"Read-only file system"). Files are replaced whole by psgd.runtime.files.atomic_write,
so a failed write never leaves a 0-byte file behind or replaces a good one.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["WriteFailed", "describe_os_error"]


class WriteFailed(RuntimeError):
    """A file psgd had to write could not be written."""

    def __init__(self, path, cause: str):
        self.path = Path(path) if path is not None else None
        self.cause = cause
        super().__init__(f"cannot write {path}: {cause}" if path is not None else f"cannot write: {cause}")


def describe_os_error(exc: OSError, path=None) -> WriteFailed:
    """The WriteFailed for `exc`, naming `exc.filename` or else `path`."""
    name = exc.filename if exc.filename is not None else path
    cause = exc.strerror or os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.ENOSPC:
        cause = "No space left on device (disk full)"
    return WriteFailed(name, cause)
