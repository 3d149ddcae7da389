"""The launcher's part in elastic workers (cluster.workers: {min, max}): which workers
to start or stop toward the target psgd.orchestrate.elastic computes, which lost worker
to let go, and the `membership` events. psgd.orchestrate.supervisor.Supervisor holds one and
hands it the children and pending restarts it decides over; the launcher starts, removes
and lists the processes."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from psgd.config import Config
from psgd.config.modes import Role
from psgd.core.restarts import PendingRestart
from psgd.orchestrate.elastic import WORKERS_FILE, Cause, Change, ElasticPlan, read_request
from psgd.orchestrate.processes import ProcessHost, RoleProcess
from psgd.orchestrate.states import ChildState
from psgd.runtime.event_names import Event

__all__ = ["ElasticMembership"]


class ElasticMembership:
    def __init__(self, plan: ElasticPlan, cfg: Config, run_dir: Path, processes: ProcessHost,
                 emit: Callable[[dict], None]):
        """`emit`: records one of the launcher's events (it adds the time and who sent it)."""
        self.plan, self.cfg, self.run_dir, self.processes, self.emit = plan, cfg, Path(run_dir), processes, emit
        self._joining: set[int] = set()   # ranks started to join, until their ready event
        # Ranks asked to stop, until their process has exited (not at their done event: a
        # process still exiting counted as live was stopped again, and its rank started twice).
        self._leaving: set[int] = set()
        self._last_clock: dict[int, int] = {}  # each worker's clock as its events last said
        self._ending = False              # a worker finished its steps: nobody joins any more

    @classmethod
    def of(cls, cfg: Config, run_dir: Path, processes: ProcessHost,
           emit: Callable[[dict], None]) -> Optional["ElasticMembership"]:
        """None for a fixed worker count (or no servers to join)."""
        span = cfg.cluster.worker_range
        if span is None or not cfg.consistency.mode.on_servers:
            return None
        # A host that reports its room (Ray) grows to it; locally the target is what psgd ctl asked.
        grows = getattr(processes, "FILLS_ROOM", False)
        earlier = read_request(Path(run_dir) / WORKERS_FILE)  # asked of a launch this one resumes
        return cls(ElasticPlan(span, follows_room=grows, earlier=earlier), cfg, run_dir, processes, emit)

    @staticmethod
    def _worker_processes(children: Sequence[RoleProcess]) -> list[RoleProcess]:
        """Workers whose process has not exited (a crashed one has left `children` by now)."""
        return [c for c in children if c.role == Role.WORKER and c.state is not ChildState.DONE]

    def live_workers(self, children: Sequence[RoleProcess]) -> list[RoleProcess]:
        return [c for c in self._worker_processes(children) if c.index not in self._leaving]

    def scale(self, children: Sequence[RoleProcess], pending: Sequence[PendingRestart]) -> list[int]:
        """Stop workers beyond the elastic target; returns the ranks to start toward it
        (the launcher starts them in place of any earlier process of that rank, which has
        exited: the plan's `busy`)."""
        self.plan.take_request(read_request(self.run_dir / WORKERS_FILE))
        self._leaving &= {c.index for c in self._worker_processes(children)}  # gone once its process has exited
        live = self.live_workers(children)
        running = [c.index for c in live] + [p.index for p in pending if p.role == Role.WORKER]
        plan = self.plan.plan(running, self.processes.worker_room(self.cfg), self._ending, busy=self._leaving)
        for c in live:
            if c.index in plan.stop and c.state is ChildState.READY:  # one still starting is stopped once ready
                self._leaving.add(c.index)
                c.terminate()
        self._joining.update(plan.start)
        return list(plan.start)

    def lets_go(self, c: RoleProcess, children: Sequence[RoleProcess], pending: Sequence[PendingRestart]) -> bool:
        """An elastic worker that exited with an error during training (or was being stopped)
        leaves the run, with no restart in place, while at least min workers remain; True
        when it was let go (its process released: the launcher drops it from its children)."""
        if c.role != Role.WORKER:
            return False
        leaving = c.index in self._leaving
        others = len([w for w in self.live_workers(children) if w is not c])
        others += sum(1 for p in pending if p.role == Role.WORKER)
        if not leaving and not self.plan.lost(others):
            return False
        self._leaving.discard(c.index)
        self._joining.discard(c.index)
        self.processes.release(c)
        # Lost, even if it was being stopped: it did not finish its step and leave the quorum itself.
        self._membership(Change.LEFT, c.index, self._last_clock.get(c.index), Cause.LOST)
        return True

    def follow(self, child: RoleProcess, e: dict) -> None:
        """A worker's event, as far as elastic membership goes."""
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

    def _membership(self, change: Change, rank: int, clock: Optional[int], cause: Cause) -> None:
        self.emit({"event": Event.MEMBERSHIP, "rank": rank, "change": str(change), "clock": clock,
                   "cause": str(cause)})
