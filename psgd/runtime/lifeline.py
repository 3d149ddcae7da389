"""Children die with the launcher that started them.

Two mechanisms, because either alone has a gap:
- Linux's PR_SET_PDEATHSIG asks the kernel to send SIGTERM when the parent
  dies (the role's SIGTERM handler then stops it the normal way);
- a watchdog thread polls the parent pid, so the check also runs where prctl
  does not exist, and a role stuck somewhere that never looks at its stop flag
  is ended anyway: `grace_s` after the parent is gone the process exits hard.

The launcher passes its pid in PSGD_LAUNCHER_PID: a child whose launcher is
already gone before the death signal was armed notices at once. An orphan
also removes the run's processes.json if it lists its own pid, since the
launcher that would have removed it is dead.
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
           "forget_processes_file", "launcher_pid_from_env"]

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


def watch_parent(parent_pid: int, on_orphan: Callable[[], None], grace_s: float = 2.0,
                 poll_s: float = 0.2) -> threading.Thread:
    """Arm the death signal and start the watchdog. `on_orphan` runs once, on
    the watchdog thread, when the parent is gone (it should ask the role to
    stop); `grace_s` later the process exits with EXIT_ORPHANED."""
    set_parent_death_signal(signal.SIGTERM)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        try:
            on_orphan()
        finally:
            time.sleep(grace_s)
            os._exit(EXIT_ORPHANED)

    t = threading.Thread(target=watch, name="psgd-parent-watch", daemon=True)
    t.start()
    return t


def launcher_pid_from_env() -> Optional[int]:
    value = os.environ.get(LAUNCHER_PID_ENV, "")
    return int(value) if value.isdigit() else None
