"""One owner per run directory: the launcher holds RUN_DIR/run.lock for the run's life.

A second launcher on the same directory (a fresh `--out` or a `--resume`) is
refused in one line naming the holder. The lock is an flock: the kernel drops it
when the holder dies, so a killed launcher never leaves a stale lock behind.

Hand-started roles (`psgd server|worker|evaluator --run-dir DIR`, each rank of
`psgd run`) are one run started piece by piece, so they cannot each own the
directory: a role holds run.lock *shared* (RoleLock), a launcher *exclusive*.
Roles of one run start beside each other; a launcher is refused while any role
lives there, and a role while a launcher does. Each role also holds
RUN_DIR/locks/ROLE-INDEX.lock exclusive, so a second `server --shard 0` cannot
write shard 0's checkpoints and events beside the first. The launcher's own
children (`--supervised`) take no lock: they work under their launcher's.

A run directory owned by another user, writable by everyone, or writable by a
group other than the owner's personal one, is refused: whoever can write it can
make the run's processes load their code (config import paths, the pickled model
and dataset of `psgd.launch`). A personal group (user-private groups, where
umask 002 is the default) holds nobody else, so g+w there is accepted; a shared
group is refused even with setgid set, since run directories inherit setgid from
a team directory without anyone deciding to trust every member of the team.
"""
from __future__ import annotations

import errno
import fcntl
import grp
import json
import os
import pwd
import socket
import stat
import time
from pathlib import Path
from typing import Optional

__all__ = ["RunDirLock", "RoleLock", "RunDirRefused", "LOCK_FILE", "ROLE_LOCK_DIR", "check_ownership"]

LOCK_FILE = "run.lock"
ROLE_LOCK_DIR = "locks"
# A filesystem without flock (Lustre mounted without -o flock, some NFS setups): a role
# starts unlocked rather than not at all; a launcher still refuses (it is local-only).
_NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


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
    if st.st_mode & stat.S_IWGRP and not _personal_group(st.st_gid, st.st_uid):
        raise RunDirRefused(f"{run_dir} is writable by group {_group_name(st.st_gid)} (mode "
                            f"{stat.S_IMODE(st.st_mode):o}), whose members are not only you: its files decide "
                            "what code the run executes; chmod g-w it")


def _personal_group(gid: int, uid: int) -> bool:
    """The owner's user-private group: their primary group, named as they are, listing no one else."""
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(uid)
    except KeyError:  # a group or user the system cannot name: nothing says it is personal
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _group_name(gid: int) -> str:
    try:
        return f"'{grp.getgrgid(gid).gr_name}'"
    except KeyError:
        return f"id {gid}"


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
            roles = _live_roles(self.path.parent) if _only_shared_holders(fd) else None
            holder = _holder(fd)
            os.close(fd)
            if roles is not None:
                raise RunDirRefused(f"{self.path.parent} is in use by hand-started psgd roles "
                                    f"({roles or 'starting'}); use another --out, or stop them first") from None
            raise RunDirRefused(f"{self.path.parent} is in use by another psgd launcher ({holder}); "
                                "use another --out, or wait for that run to end") from None
        _write_holder(fd)
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


class RoleLock:
    """A hand-started role's hold on its run directory: run.lock shared, its own slot exclusive.
    `held` is False where the filesystem has no flock: the role runs unguarded."""

    def __init__(self, run_dir: Path, role: str, index: int):
        self.run_dir = Path(run_dir)
        self.slot = f"{role}-{index}"
        self.held = False
        self._fds: list[int] = []

    def acquire(self) -> "RoleLock":
        self.run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)  # a hand-started role may come first
        check_ownership(self.run_dir)
        run_fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        self._fds.append(run_fd)
        try:
            refused = (f"{self.run_dir} is in use by a psgd launcher ({_holder(run_fd)}), which starts "
                       "its own roles; give this one another --run-dir, or stop that run first")
            if not self._flock(run_fd, fcntl.LOCK_SH | fcntl.LOCK_NB, refused):
                return self
            (self.run_dir / ROLE_LOCK_DIR).mkdir(mode=0o700, exist_ok=True)
            slot_fd = os.open(self.run_dir / ROLE_LOCK_DIR / f"{self.slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            self._fds.append(slot_fd)
            refused = (f"{self.run_dir} already has {self.slot.replace('-', ' ')} running "
                       f"({_holder(slot_fd)}); one process per role and index in a run directory")
            if self._flock(slot_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, refused):
                _write_holder(slot_fd)
                self.held = True
            return self
        except BaseException:
            self.release()
            raise

    def _flock(self, fd: int, op: int, refused: str = "") -> bool:
        """True when taken; False when the filesystem cannot lock. Raises RunDirRefused when held."""
        try:
            fcntl.flock(fd, op)
            return True
        except BlockingIOError:
            raise RunDirRefused(refused) from None
        except OSError as exc:
            if exc.errno in _NO_LOCKS:
                return False
            raise

    def release(self) -> None:
        for fd in reversed(self._fds):
            os.close(fd)  # closing drops the flock
        self._fds.clear()
        self.held = False

    def __enter__(self) -> "RoleLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _write_holder(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                              "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)


def _only_shared_holders(fd: int) -> bool:
    """Whether run.lock is held shared (roles) rather than exclusive (a launcher)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _live_roles(run_dir: Path) -> str:
    """The roles holding their slot now, as `server 0 (pid 12 on host since ...)`."""
    live = []
    for path in sorted((run_dir / ROLE_LOCK_DIR).glob("*.lock")):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)  # free: that role has ended
        except BlockingIOError:
            live.append(f"{path.stem.replace('-', ' ')} ({_holder(fd)})")
        finally:
            os.close(fd)
    return ", ".join(live)


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError):
        return "a process that did not say who it is"
