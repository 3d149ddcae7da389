"""What every psgd process (server, worker, evaluator) does on start.

Given its loaded config, it limits torch threads, turns
SIGTERM/SIGINT into a stop event, opens the process's events file and, when
started by the launcher, waits for the common start signal so that every
process shares one training clock.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.config import Config
from psgd.runtime.events import EventLog
from psgd.runtime.lifeline import beat, forget_processes_file, heartbeat_path, launcher_pid_from_env, watch_parent

__all__ = ["RoleContext", "RoleFailed", "start_role", "START_FILE", "EXIT_NO_RETRY"]

START_FILE = "start.json"
EXIT_NO_RETRY = 2  # like a config error: starting again would fail the same way


@dataclass
class RoleContext:
    cfg: Config
    role: str
    index: int
    run_dir: Optional[Path]
    events: EventLog
    stop: threading.Event
    supervised: bool
    parent_pid: int

    def orphaned(self) -> bool:
        """True once the launcher that started us is gone (we must not outlive it)."""
        return self.supervised and os.getppid() != self.parent_pid

    def should_stop(self) -> bool:
        return self.stop.is_set() or self.orphaned()

    def poll_start(self) -> bool:
        """Non-blocking: pick up the start time once the launcher has written it.
        Always returns False so it can sit in a stop condition."""
        if self.events.t0 is None and self.run_dir is not None:
            start = self.run_dir / START_FILE
            if start.exists():
                self.events.t0 = json.loads(start.read_text())["t0"]
        return False

    def wait_for_start(self, poll_s: float = 0.01) -> bool:
        """Block until the launcher's start signal (if supervised); sets the
        events clock. Returns False if told to stop first."""
        start = self.run_dir / START_FILE if (self.run_dir and self.supervised) else None
        while start is not None and not start.exists():
            if self.should_stop():
                return False
            time.sleep(poll_s)
        self.events.t0 = json.loads(start.read_text())["t0"] if start is not None else time.time()
        return True


class RoleFailed(RuntimeError):
    """A role could not start or run for a reason that is not the config's: exit
    code 1, or EXIT_NO_RETRY when `retry` is False (it would fail the same way
    again, e.g. a damaged checkpoint or a full disk: the launcher does not restart it)."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry

    @property
    def exit_code(self) -> int:
        return 1 if self.retry else EXIT_NO_RETRY


def start_role(role: str, index: int, cfg: Config, run_dir: Optional[Path] = None,
               supervised: bool = False) -> RoleContext:
    """Set this process up for `role` with an already loaded config."""
    import torch  # here, not at module level: importing the role table must stay cheap

    torch.set_num_threads(cfg.run.threads)
    stop = threading.Event()

    def on_signal(*_):
        # The handler runs on the main thread, possibly inside stop.wait() (a straggler's
        # delay) while that holds the Event's lock: stop.set() from here would wait for
        # that lock forever. A short thread sets it once the wait lets the lock go.
        try:
            threading.Thread(target=stop.set, name="psgd-stop", daemon=True).start()
        except RuntimeError:  # the interpreter is shutting down: no new threads, and no wait under way
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    run_dir = Path(run_dir) if run_dir else None
    path = run_dir / "events" / f"{role}-{index}.jsonl" if run_dir else None
    events = EventLog(path, role, index)
    if not supervised:
        events.t0 = time.time()  # no common start signal: this process's clock starts now
    parent = launcher_pid_from_env() or os.getppid()
    if supervised:  # never outlive the launcher, even one killed with -9
        watch_parent(parent, lambda: forget_processes_file(run_dir, os.getpid()))
        if run_dir is not None:  # and say that it runs: a frozen process stops saying so
            beat(heartbeat_path(run_dir, role, index), cfg.cluster.heartbeat_s)
    ctx = RoleContext(cfg, role, index, run_dir, events, stop, supervised, parent)
    ctx.poll_start()  # a restart into a started run: its first events (ready, resumed) are on the run's clock
    return ctx
