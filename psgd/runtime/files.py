"""Writing run-directory files safely."""
from __future__ import annotations

import os
from pathlib import Path

from psgd.runtime.safe_io import open_no_follow

__all__ = ["atomic_write"]


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (temp file, fsync, rename), safe
    when several hosts write it; the temp file is removed if the write fails."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # hosts may share the directory
    try:
        with open_no_follow(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
