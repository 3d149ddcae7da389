"""Writing run files so that a filesystem error is one clear line, not a traceback
and a half-written file.

`WriteFailed` names the path and the cause ("No space left on device",
"Read-only file system"); `atomic_write_text` writes through a temp file
that is removed again when anything goes wrong, so a failed write never
leaves a 0-byte file behind or replaces a good one.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

__all__ = ["WriteFailed", "atomic_write_text", "describe_os_error"]


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


def atomic_write_text(path, text: str, fsync: bool = True) -> None:
    """Replace `path` with `text` or raise WriteFailed with `path` untouched."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise describe_os_error(exc, path) from None


def _unlink_quietly(path: Path) -> Optional[OSError]:
    try:
        path.unlink(missing_ok=True)
        return None
    except OSError as exc:
        return exc
