"""A host's cores in the time model (`sim.sharing`): how the CPU jobs of the roles on one host share them.

- `fcfs` (Cores): a job takes the core that can start it soonest and holds it to its end; its end is
  known when it is issued.
- `ps` (SharedCores): processor sharing, as Linux's scheduler (CFS) approaches it with short slices:
  while k jobs are runnable on n cores each progresses at min(1, n / k) of a core, so a woken job
  starts at once and every job slows as more share the cores. A role is one thread: its jobs run one
  after another in the order issued. A job's end depends on jobs issued after it (they slow it), so
  `Job.end` is its end as far as the jobs issued so far decide; it only moves later, and the engine
  checks an event due at a job's end again when it comes (psgd.sim.event_queue).
"""
from __future__ import annotations

import bisect
import math
from typing import Hashable, Optional

__all__ = ["Cores", "SharedCores", "TurnCores", "Job", "Due", "cores_for", "linux_slice_s"]

_DONE = 1e-12  # seconds of work below which a job has finished (the fluid steps' rounding)


class Job:
    """One CPU job: `end` (seconds), final when the sharing rule fixed it at issue."""
    __slots__ = ("key", "ready", "left", "end", "final")

    def __init__(self, key: Hashable, ready: float, work_s: float, end: float = math.inf, final: bool = False):
        self.key, self.ready, self.left, self.end, self.final = key, ready, work_s, end, final


class Cores:
    """`n` cores. A job takes the core that can start it soonest at or after it is ready and hold it for
    its whole duration without preemption; a job booked for a later instant does not hold a core
    before it (a job ready sooner runs in the gap before it when it fits). Among jobs ready at
    once, the one issued first is booked first: first come, first served."""

    def __init__(self, n: int):
        self.booked: list[list[tuple[float, float]]] = [[] for _ in range(n)]  # per core: (start, end), sorted
        self.busy_s = 0.0

    def run(self, ready: float, busy_s: float, now: float = 0.0) -> float:
        """A job ready at `ready` taking `busy_s` of one core: returns its end. `now`: no job is
        issued for an instant before it any more (bookings that ended are forgotten)."""
        best, best_core, best_at = math.inf, 0, 0
        for c, spans in enumerate(self.booked):
            while spans and spans[0][1] <= now:
                spans.pop(0)
            start, at = ready, 0
            i = bisect.bisect_right(spans, (ready, math.inf))
            if i and spans[i - 1][1] > start:
                start = spans[i - 1][1]
            at = i
            while at < len(spans) and spans[at][0] < start + busy_s:
                start = max(start, spans[at][1])
                at += 1
            if start < best:
                best, best_core, best_at = start, c, at
        self.booked[best_core].insert(best_at, (best, best + busy_s))
        self.busy_s += busy_s
        return best + busy_s


    def book(self, ready: float, busy_s: float, now: float, key: Hashable) -> Job:
        """As `run`, the end fixed at issue (`key`: the role; first come first served needs none)."""
        return Job(key, ready, busy_s, self.run(ready, busy_s, now), final=True)


class SharedCores:
    """`n` cores shared by processor sharing among the runnable jobs, each role's jobs in turn
    (see the module's docstring). Not thread-safe."""

    def __init__(self, n: int):
        self.n = n
        self.jobs: list[Job] = []  # unfinished at `self.at`, in the order issued
        self.at = 0.0
        self.busy_s = 0.0

    def book(self, ready: float, busy_s: float, now: float, key: Hashable) -> Job:
        """A job of `busy_s` of role `key`, ready at `ready` (and after the role's earlier jobs); `now`:
        no job is issued for an earlier instant any more. Every unfinished job's end is updated."""
        self._advance(max(now, self.at))
        job = Job(key, max(ready, self.at), busy_s)
        self.jobs.append(job)
        self.busy_s += busy_s
        self._fluid(math.inf)
        return job

    def run(self, ready: float, busy_s: float, now: float = 0.0, key: Optional[Hashable] = None) -> float:
        """`book`'s end as the jobs issued so far decide (`key` None: a role of its own)."""
        return self.book(ready, busy_s, now, object() if key is None else key).end

    def _advance(self, to: float) -> None:
        """The jobs' work left at `to`; the finished ones are forgotten."""
        if to > self.at:
            self._fluid(to)
            self.at = to
            self.jobs = [j for j in self.jobs if j.left > _DONE]

    def _fluid(self, until: float) -> None:
        """Runs the jobs from `self.at`: up to `until`, their work left written back; to the end
        (`until` inf), their ends written."""
        left = {id(j): j.left for j in self.jobs}
        t, pending = self.at, [j for j in self.jobs if left[id(j)] > _DONE]
        while pending and t < until:
            heads, seen = [], set()
            for j in pending:  # each role's first unfinished job; its later ones wait for it
                if j.key not in seen:
                    seen.add(j.key)
                    heads.append(j)
            running = [j for j in heads if j.ready <= t]
            later = min((j.ready for j in heads if j.ready > t), default=math.inf)
            if not running:
                t = min(later, until)
                continue
            rate = min(1.0, self.n / len(running))
            dt = min(min(left[id(j)] for j in running) / rate, later - t, until - t)
            t += dt
            for j in running:
                left[id(j)] -= rate * dt
                if left[id(j)] <= _DONE:
                    j.end = t
            pending = [j for j in pending if left[id(j)] > _DONE]
        if until != math.inf:
            for j in self.jobs:
                j.left = left[id(j)]


def linux_slice_s(n: int) -> float:
    """Linux's default time slice on `n` cores (EEVDF's base_slice, CFS's min_granularity): 0.75 ms x
    (1 + log2(min(n, 8)))."""
    return 0.75e-3 * (1 + int(math.log2(min(n, 8))))


class _Turns:
    """Round robin's state at an instant: the jobs on the cores (with their slice left), the queue of
    runnable jobs waiting for a core, and each job's work left."""

    def __init__(self, left: dict, running: list, queue: list, back: list):
        self.left, self.running, self.queue, self.back = left, running, queue, back  # back: slices just ended

    def copy(self) -> "_Turns":
        return _Turns(dict(self.left), [list(r) for r in self.running], list(self.queue), list(self.back))


class TurnCores:
    """`n` cores shared in turns (sim.sharing: rr): a runnable job takes a free core, or waits at the
    back of the queue; it runs for at most a slice (linux_slice_s), then goes to the back of the queue
    if others wait. A job shorter than a slice runs to its end as under first come first served; longer
    ones share the cores as under processor sharing. Each role's jobs run in turn; ends move later as
    jobs are issued after them (the module's docstring). Not thread-safe."""

    def __init__(self, n: int, slice_s: Optional[float] = None):
        self.n, self.slice_s = n, linux_slice_s(n) if slice_s is None else slice_s
        self.jobs: list[Job] = []  # unfinished at `self.at`, in the order issued
        self.state = _Turns({}, [], [], [])
        self.at = 0.0
        self.busy_s = 0.0

    def book(self, ready: float, busy_s: float, now: float, key: Hashable) -> Job:
        """As SharedCores.book, in turns."""
        if now > self.at:
            self._turns(self.state, now)
            self.at = now
            self.jobs = [j for j in self.jobs if self.state.left[id(j)] > _DONE]
            self.state.left = {id(j): self.state.left[id(j)] for j in self.jobs}
        job = Job(key, max(ready, self.at), busy_s)
        self.jobs.append(job)
        self.state.left[id(job)] = busy_s
        self.busy_s += busy_s
        self._turns(self.state.copy(), math.inf)
        return job

    def run(self, ready: float, busy_s: float, now: float = 0.0, key: Optional[Hashable] = None) -> float:
        return self.book(ready, busy_s, now, object() if key is None else key).end

    def _turns(self, state: _Turns, until: float) -> None:
        """Runs `state` from `self.at` to `until` (inf: until every job ends, their ends written). A job
        woken at an instant queues before one whose slice ended then."""
        t, left = self.at, state.left
        while True:
            if t >= until:
                return
            placed = {id(r[0]) for r in state.running} | {id(j) for j in state.queue} | {id(j) for j in state.back}
            heads, seen = [], set()
            for j in self.jobs:  # each role's first unfinished job; its later ones wait for it
                if left[id(j)] > _DONE and j.key not in seen:
                    seen.add(j.key)
                    heads.append(j)
            state.queue += [j for j in heads if j.ready <= t and id(j) not in placed] + state.back
            state.back = []
            while state.queue and len(state.running) < self.n:
                state.running.append([state.queue.pop(0), self.slice_s])
            later = min((j.ready for j in heads if j.ready > t), default=math.inf)
            if not state.running:
                if later == math.inf:
                    return
                t = min(later, until)
                continue
            dt = min(min(min(left[id(j)], s) for j, s in state.running), later - t, until - t)
            t += dt
            keep = []
            for r in state.running:
                left[id(r[0])] -= dt
                r[1] -= dt
                if left[id(r[0])] <= _DONE:
                    r[0].end = t
                elif r[1] <= _DONE:
                    state.back.append(r[0])  # its slice is over: behind whoever is waiting (alone, it runs again)
                else:
                    keep.append(r)
            state.running = keep


def cores_for(sharing: str, n: int):
    """A host's cores under `sim.sharing`."""
    return {"ps": SharedCores, "rr": TurnCores}.get(sharing, Cores)(n)


class Due:
    """When an event that follows a job is due: `at` = max(`floor`, the job's end) + `offset`; `moves`:
    whether that may still move later (processor sharing: jobs issued after the job slow it)."""
    __slots__ = ("job", "offset", "floor")

    def __init__(self, job: Job, offset: float = 0.0, floor: float = -math.inf):
        self.job, self.offset, self.floor = job, offset, floor

    @property
    def at(self) -> float:
        return max(self.floor, self.job.end) + self.offset

    @property
    def moves(self) -> bool:
        return not self.job.final

    def then(self, at: float) -> "Due":
        """An event at `at` that follows this one by a fixed time (a message's flight after it leaves)."""
        return Due(self.job, self.offset + at - self.at, self.floor)
