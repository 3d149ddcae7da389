"""The one way psgd replaces a file: whole or not at all.

Every file a reader may open while it is rewritten (config.yaml, summary.json,
the run token, snapshots, the task cache) goes through `atomic_write`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable, Optional, Union

__all__ = ["atomic_write", "fsync_dir"]

Data = Union[str, bytes, bytearray, memoryview, Callable[[BinaryIO], None]]


def atomic_write(path, data: Data, *, fsync: bool = True, mode: int = 0o666,
                 keep_old_as: Optional[Path] = None, sync_dir: bool = False) -> None:
    """Replace `path` with `data` in one step: a temp file beside it (named for this
    process: hosts may share the directory), fsync, rename. `data` is text, bytes,
    or a function writing into the open binary file (torch.save, numpy.savez).
    `mode`: the file's permissions from creation on (less the umask; 0o600 for a secret).
    `keep_old_as`: the previous file is renamed there first. `sync_dir`: fsync the
    directory too, so the rename itself survives a power loss. Raises OSError;
    the temp file is removed when anything fails, and `path` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.unlink(missing_ok=True)  # a leftover of a write cut short: never reuse its permissions
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        if keep_old_as is not None and path.exists():
            os.replace(path, keep_old_as)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
