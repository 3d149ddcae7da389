"""The launcher's part in elastic workers (cluster.workers: {min, max}): starting and
stopping workers toward the target psgd.orchestrate.elastic computes, letting lost
workers go, and the `membership` events. A mixin of psgd.orchestrate.launcher.Launcher,
whose children, pending restarts, event stream and process host it works on."""
from __future__ import annotations

import time
from typing import Optional

from psgd.config import Config
from psgd.config.modes import Role
from psgd.orchestrate.elastic import WORKERS_FILE, Cause, Change, ElasticPlan, read_request
from psgd.orchestrate.processes import RoleProcess
from psgd.orchestrate.states import ChildState
from psgd.runtime.event_names import Event

__all__ = ["ElasticMembership"]


class ElasticMembership:
    def _init_elastic(self, cfg: Config) -> None:
        """The target and the ranks joining or leaving (elastic is None for a fixed count)."""
        span = cfg.cluster.worker_range
        # A host that reports its room (Ray) grows to it; locally the target is what psgd ctl asked.
        grows = getattr(self.processes, "FILLS_ROOM", False)
        earlier = read_request(self.run_dir / WORKERS_FILE)  # asked of a launch this one resumes
        self.elastic = (ElasticPlan(span, follows_room=grows, earlier=earlier)
                        if span is not None and cfg.consistency.mode.on_servers else None)
        self._joining: set[int] = set()   # ranks started to join, until their ready event
        # Ranks asked to stop, until their process has exited (not at their done event: a
        # process still exiting counted as live was stopped again, and its rank started twice).
        self._leaving: set[int] = set()
        self._last_clock: dict[int, int] = {}  # each worker's clock as its events last said
        self._ending = False              # a worker finished its steps: nobody joins any more

    def _worker_processes(self) -> list[RoleProcess]:
        """Workers whose process has not exited (a crashed one has left `children` by now)."""
        return [c for c in self.children if c.role == Role.WORKER and c.state is not ChildState.DONE]

    def _live_workers(self) -> list[RoleProcess]:
        return [c for c in self._worker_processes() if c.index not in self._leaving]

    def _scale(self) -> None:
        """Start or stop workers toward the elastic target."""
        self.elastic.take_request(read_request(self.run_dir / WORKERS_FILE))
        self._leaving &= {c.index for c in self._worker_processes()}  # gone once its process has exited
        live = self._live_workers()
        running = [c.index for c in live] + [p.index for p in self._pending if p.role == Role.WORKER]
        plan = self.elastic.plan(running, self.processes.worker_room(self.cfg), self._ending, busy=self._leaving)
        for c in live:
            if c.index in plan.stop and c.state is ChildState.READY:  # one still starting is stopped once ready
                self._leaving.add(c.index)
                c.terminate()
        for rank in plan.start:  # its earlier process, if any, has exited (plan's `busy`)
            self.children = [c for c in self.children if not (c.role == Role.WORKER and c.index == rank)]
            self._joining.add(rank)
            self._spawn(Role.WORKER, rank)
        if plan.start:
            self._write_processes()

    def _lets_go(self, c: RoleProcess) -> bool:
        """An elastic worker that exited with an error during training (or was being stopped)
        leaves the run, with no restart in place, while at least min workers remain; True
        when it was let go."""
        if self.elastic is None or c.role != Role.WORKER or self._t0 is None:
            return False
        leaving = c.index in self._leaving
        others = len([w for w in self._live_workers() if w is not c])
        others += sum(1 for p in self._pending if p.role == Role.WORKER)
        if not leaving and not self.elastic.lost(others):
            return False
        self.children.remove(c)
        self._leaving.discard(c.index)
        self._joining.discard(c.index)
        self.processes.release(c)
        # Lost, even if it was being stopped: it did not finish its step and leave the quorum itself.
        self._membership(Change.LEFT, c.index, self._last_clock.get(c.index), Cause.LOST)
        self._write_processes()
        return True

    def _membership(self, change: Change, rank: int, clock: Optional[int], cause: Cause) -> None:
        self._record(None, {"t": round(time.time() - self._t0, 4), "role": "launcher", "index": 0,
                            "event": Event.MEMBERSHIP, "rank": rank, "change": str(change), "clock": clock,
                            "cause": str(cause)})

    def _follow_membership(self, child: RoleProcess, e: dict) -> None:
        """A worker's events, as far as elastic membership goes."""
        kind = e.get("event")
        if "clock" in e and kind in (Event.READY, Event.STEP, Event.DONE):
            self._last_clock[child.index] = e["clock"]
        if kind == Event.READY and child.index in self._joining:
            self._joining.discard(child.index)
            self._membership(Change.JOINED, child.index, e.get("clock"), Cause.SCALED_UP)
        elif kind == Event.DONE:
            if child.index in self._leaving:  # it stays leaving until its process has exited
                self.processes.release(child)
                self._membership(Change.LEFT, child.index, e.get("clock"), Cause.SCALED_DOWN)
            else:
                self._ending = True

