"""Elastic workers (`cluster.workers: {min, max}`): which ranks the launcher runs.

The resource rule, one place for every launcher:
- the run starts `min` workers (ranks 0..min-1);
- the target count is what the user asked for last (`psgd ctl RUN_DIR workers N`,
  N in [min, max], read from RUN_DIR/workers.json; before any request: min locally,
  max on Ray), capped by the room the host reports (Ray: worker slots on live
  nodes; locally: no cap), never below min;
- the launcher starts new workers (the lowest free ranks) up to the target and
  stops the newest ones (SIGTERM: they leave the shards' quorum) down to it;
- a worker lost (killed, crashed, or gone with its node) is not restarted in place
  while at least min workers remain: the run goes on with one fewer, and the
  target drops with it (on Ray the room decides: a node added again brings workers
  back). Below min the launcher's restart budget replaces it.
No worker is started once one has finished its steps (the run is ending).
Every change is a `membership` event (rank, change, clock, cause) in metrics.jsonl,
and summary.json lists them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterable, Optional

from psgd.config import ConfigError, load_config
from psgd.config.elastic import WorkerRange
from psgd.orchestrate.roles import CONFIG_FILE
from psgd.runtime.files import atomic_write
from psgd.runtime.lifeline import PROCESSES_FILE

__all__ = ["WORKERS_FILE", "Change", "Cause", "ElasticPlan", "WorkersRequestFailed", "request_workers",
           "read_request"]

WORKERS_FILE = "workers.json"  # the worker count asked for last (psgd ctl RUN_DIR workers N)


class Change(str, Enum):
    JOINED = "joined"
    LEFT = "left"

    def __str__(self) -> str:
        return self.value


class Cause(str, Enum):
    SCALED_UP = "scaled_up"      # the target grew (psgd ctl, or room on a new node)
    SCALED_DOWN = "scaled_down"  # the target shrank: stopped by the launcher, it left the quorum
    LOST = "lost"                # killed, crashed, or gone with its node; not restarted in place

    def __str__(self) -> str:
        return self.value


class WorkersRequestFailed(RuntimeError):
    """`psgd ctl RUN_DIR workers N` was refused; nothing was asked of the run."""


def request_workers(run_dir: Path, count: int) -> WorkerRange:
    """Ask the launcher of the live run in `run_dir` for `count` workers (it acts within
    a tenth of a second). Returns the run's range. Raises WorkersRequestFailed, also for
    a run that has ended (no launcher would act: its processes.json is gone, as `show` says)."""
    run_dir = Path(run_dir)
    try:
        cfg = load_config(run_dir / CONFIG_FILE)
    except ConfigError as exc:
        raise WorkersRequestFailed(f"{run_dir} is not a psgd run directory: {exc}") from None
    span = cfg.cluster.worker_range
    if span is None:
        raise WorkersRequestFailed(f"cluster.workers is a fixed count ({cfg.cluster.workers}) in this run: "
                                   "give it a range {min, max} to change it while it runs")
    if not span.min <= count <= span.max:
        raise WorkersRequestFailed(f"{count} workers is outside cluster.workers [{span.min}, {span.max}]")
    if not (run_dir / PROCESSES_FILE).is_file():
        raise WorkersRequestFailed(f"{run_dir / PROCESSES_FILE} not found: is the run still live?")
    try:
        atomic_write(run_dir / WORKERS_FILE, json.dumps({"workers": count}), mode=0o644)
    except OSError as exc:
        raise WorkersRequestFailed(f"cannot write {run_dir / WORKERS_FILE}: {exc.strerror or exc}") from None
    return span


def read_request(path: Path) -> Optional[tuple[int, int]]:
    """(mtime_ns, count) of a workers request file, None when there is none or it is not one."""
    try:
        stamp = os.stat(path).st_mtime_ns
        count = json.loads(path.read_text())["workers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(count, bool) or not isinstance(count, int):
        return None
    return stamp, count


@dataclass(frozen=True)
class Plan:
    start: list[int]  # ranks to start
    stop: list[int]   # ranks to stop (they leave the quorum)


class ElasticPlan:
    """The target count and which ranks to start or stop to reach it (no processes here)."""

    def __init__(self, span: WorkerRange, follows_room: bool = False,
                 earlier: Optional[tuple[int, int]] = None):
        """`follows_room`: the host reports its room (Ray): the target starts at max and
        the room decides; else it starts at min and requests decide. `earlier`: the request
        file as this launch found it, asked of an earlier launch of the run directory: not
        taken (a resumed run starts as a new one does)."""
        self.span = span
        self.follows_room = follows_room
        self.target = span.max if follows_room else span.min
        self._seen: Optional[int] = earlier[0] if earlier else None  # mtime of the request already taken

    def take_request(self, request: Optional[tuple[int, int]]) -> bool:
        """Adopt a new `read_request` result; True when the target changed."""
        if request is None or request[0] == self._seen:
            return False
        self._seen = request[0]
        wanted = min(self.span.max, max(self.span.min, request[1]))  # the CLI checked; a hand-written file may not be
        changed = wanted != self.target
        self.target = wanted
        return changed

    def lost(self, running: int) -> bool:
        """A worker was lost with `running` others left: True when the run goes on without it
        (at least min remain); the target drops with it, unless the room decides (a node
        that comes back brings its workers back). False: replace it (below min)."""
        if running < self.span.min:
            return False
        if not self.follows_room:
            self.target = max(self.span.min, min(self.target, running))
        return True

    def plan(self, running: Iterable[int], room: Optional[int], ending: bool, busy: Iterable[int] = ()) -> Plan:
        """What to start and stop. `running`: ranks with a live process (or one booked to
        restart); `room`: how many workers the host holds now (None: no cap); `ending`:
        a worker has finished its steps (start nobody); `busy`: ranks stopped whose process
        has not exited yet: not started again before it has (one process per rank)."""
        running = sorted(running)
        target = self.target if room is None else max(self.span.min, min(self.target, room))
        if len(running) > target:
            return Plan([], running[target - len(running):])  # the newest ranks go first
        if ending or len(running) == target:
            return Plan([], [])
        taken = set(running) | set(busy)
        free = [r for r in range(self.span.max) if r not in taken]
        return Plan(free[:target - len(running)], [])
