"""One owner per run directory: the launcher holds RUN_DIR/run.lock for the run's life.

A second launcher on the same directory (a fresh `--out` or a `--resume`) is
refused in one line naming the holder. The lock is an flock: the kernel drops it
when the holder dies, so a killed launcher never leaves a stale lock behind.
A run directory owned by another user, or writable by everyone, is refused:
whoever can write it can make the run's processes load their code (config
import paths, the pickled model and dataset of `psgd.launch`).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Optional

__all__ = ["RunDirLock", "RunDirRefused", "LOCK_FILE", "check_ownership"]

LOCK_FILE = "run.lock"


class RunDirRefused(RuntimeError):
    """This process may not use the run directory (another holds it, or it is not safe)."""


def check_ownership(run_dir: Path) -> None:
    """Refuse a directory of another user, or one anybody may write to."""
    st = os.stat(run_dir)
    if st.st_uid != os.geteuid():
        raise RunDirRefused(f"{run_dir} belongs to user id {st.st_uid}, not to this user ({os.geteuid()}): "
                            "its files decide what code the run executes")
    if st.st_mode & stat.S_IWOTH:
        raise RunDirRefused(f"{run_dir} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}): "
                            "its files decide what code the run executes; chmod o-w it")


class RunDirLock:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: Optional[int] = None

    def acquire(self) -> "RunDirLock":
        check_ownership(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirRefused(f"{self.path.parent} is in use by another psgd launcher ({holder}); "
                                "use another --out, or wait for that run to end") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "RunDirLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError):
        return "a process that did not say who it is"
