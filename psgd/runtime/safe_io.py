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

__all__ = ["WriteFailed", "describe_os_error", "open_no_follow"]


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


NOT_THROUGH_LINKS = "it is a symbolic link the run did not create: nothing is written through it"


def open_no_follow(path, mode: str = "a", **kwargs):
    """Open a run file for writing ("a", "w", "wb", ...) unless its name is a symbolic link:
    whoever can plant a link in a run directory must not make the run overwrite or append
    to a file elsewhere. Raises WriteFailed naming the path (OSError for other causes)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise WriteFailed(path, NOT_THROUGH_LINKS) from None
        raise
    return os.fdopen(fd, mode, **kwargs)
