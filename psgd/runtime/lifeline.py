"""Children die with the launcher that started them.

Two mechanisms, because either alone has a gap:
- Linux's PR_SET_PDEATHSIG asks the kernel to send SIGHUP the moment the
  parent dies, caught here;
- a watchdog thread polls the parent pid, so the check also runs where prctl
  does not exist, and even if the signal was missed.

Either way the orphan exits at once (os._exit), without the graceful stop a
SIGTERM would start: nothing is lost by it (a shard's log already holds every
acknowledged push; a worker redoes its unacknowledged step on resume), and a
graceful stop can take seconds on a loaded machine. Before exiting it removes
the run's processes.json if the file lists its own pid, since the launcher
that would have removed it is dead. The launcher passes its pid in
PSGD_LAUNCHER_PID, so a child whose launcher died before the death signal was
armed notices at once.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

__all__ = ["LAUNCHER_PID_ENV", "PROCESSES_FILE", "EXIT_ORPHANED", "watch_parent", "set_parent_death_signal",
           "forget_processes_file", "launcher_pid_from_env", "heartbeat_path", "beat"]

LAUNCHER_PID_ENV = "PSGD_LAUNCHER_PID"
PROCESSES_FILE = "processes.json"
EXIT_ORPHANED = 125
_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` when our parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def forget_processes_file(run_dir: Optional[Path], pid: int) -> None:
    """Remove RUN_DIR/processes.json if it describes a run `pid` belongs to."""
    if run_dir is None:
        return
    path = Path(run_dir) / PROCESSES_FILE
    try:
        entries = json.loads(path.read_text())
        if any(e.get("pid") == pid for e in entries):
            path.unlink(missing_ok=True)
    except (OSError, ValueError, AttributeError):
        pass  # gone already, or not ours to judge


def watch_parent(parent_pid: int, on_orphan: Callable[[], None], poll_s: float = 0.1) -> threading.Thread:
    """Arm the death signal (main thread only) and start the watchdog. When the
    parent is gone, `on_orphan` runs once (keep it short) and the process exits
    with EXIT_ORPHANED."""
    done = threading.Lock()

    def orphaned(*_) -> None:
        if not done.acquire(blocking=False):
            return  # the other mechanism got here first
        try:
            on_orphan()
        finally:
            os._exit(EXIT_ORPHANED)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, orphaned)
        set_parent_death_signal(signal.SIGHUP)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        orphaned()

    t = threading.Thread(target=watch, name="psgd-parent-watch", daemon=True)
    t.start()
    return t


def launcher_pid_from_env() -> Optional[int]:
    value = os.environ.get(LAUNCHER_PID_ENV, "")
    return int(value) if value.isdigit() else None


def heartbeat_path(run_dir: Path, role: str, index: int) -> Path:
    """The file a supervised process touches while it runs: the launcher reads its age."""
    return Path(run_dir) / "heartbeats" / f"{role}-{index}"


def beat(path: Path, every_s: float) -> threading.Thread:
    """Touch `path` every `every_s` from a thread of its own: a process frozen whole
    (SIGSTOP, a hung interpreter) stops touching it, one busy in its main thread does not."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def touch() -> None:
        while True:
            try:
                path.touch()
            except OSError:
                pass  # a full or read-only disk: the launcher reports that itself
            time.sleep(every_s)

    path.touch()
    t = threading.Thread(target=touch, name="psgd-heartbeat", daemon=True)
    t.start()
    return t
