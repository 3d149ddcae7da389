"""What every psgd process (server, worker, evaluator) does on start.

Parses the common arguments, loads the config, limits torch threads, turns
SIGTERM/SIGINT into a stop event, opens the process's events file and, when
started by the launcher, waits for the common start signal so that every
process shares one training clock.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.config import Config, load_config
from psgd.metrics import EventLog

__all__ = ["RoleContext", "start_role", "START_FILE", "ROLE_MODULES"]

START_FILE = "start.json"

# Role -> (module started with `python -m`, its index flag). psgd starts roles by
# these paths and never imports servers/ or workers/ itself.
ROLE_MODULES = {
    "server": ("servers.shard", "--shard"),
    "worker": ("workers.worker", "--rank"),
    "evaluator": ("workers.evaluator", "--index"),
    "allreduce": ("workers.allreduce_worker", "--rank"),
}


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


def parse_role_args(role: str, index_flag: str, argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"psgd {role}")
    p.add_argument("config")
    p.add_argument(index_flag, dest="index", type=int, default=0)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--run-dir", default=None, help="where events and outputs go")
    p.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def start_role(role: str, args: argparse.Namespace) -> RoleContext:
    """Load config and set the process up for `role`. Raises ConfigError."""
    import torch  # here, not at module level: the launcher imports this module and never needs torch

    cfg = load_config(args.config, args.overrides)
    torch.set_num_threads(cfg.run.threads)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run_dir = Path(args.run_dir) if args.run_dir else None
    path = run_dir / "events" / f"{role}-{args.index}.jsonl" if run_dir else None
    events = EventLog(path, role, args.index)
    if not args.supervised:
        events.t0 = time.time()  # no common start signal: this process's clock starts now
    return RoleContext(cfg, role, args.index, run_dir, events, stop, args.supervised, os.getppid())
