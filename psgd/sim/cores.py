"""A host's cores in the time model (`sim.sharing`): how the CPU jobs of the roles on one host share them.

- `fcfs` (Cores): a job takes the core that can start it soonest and holds it to its end; its end is
  known when it is issued.
- `ps` (SharedCores): processor sharing, as Linux's scheduler (CFS) approaches it with short slices:
  while k jobs are runnable on n cores each progresses at min(1, n / k) of a core, so a woken job
  starts at once and every job slows as more share the cores. A role is one thread: its jobs run one
  after another in the order issued. A job's end depends on jobs issued after it (they slow it), so
  `Job.end` is its end as far as the jobs issued so far decide; it only moves later, and the engine
  checks an event due at a job's end again when it comes (psgd.sim.event_queue).
- `rr` (TurnCores): Linux's EEVDF in turns of its slice, a used slice noticed at the kernel's tick; ends
  move as under `ps`.
"""
from __future__ import annotations

import bisect
import collections
import heapq
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
        t, (roles, waiting) = self.at, _Roles.of(self.jobs, left, set())
        running: list[Job] = []  # the roles' first unfinished jobs that are ready
        while (running or waiting) and t < until:
            while waiting and waiting[0][0] <= t:
                running.append(heapq.heappop(waiting)[2])
            later = waiting[0][0] if waiting else math.inf
            if not running:
                t = min(later, until)
                continue
            rate = min(1.0, self.n / len(running))
            dt = min(min([left[id(j)] for j in running]) / rate, later - t, until - t)
            t += dt
            still, done = [], rate * dt
            for j in running:
                left[id(j)] -= done
                if left[id(j)] <= _DONE:
                    j.end = t
                    roles.next_after(j, waiting)
                else:
                    still.append(j)
            running = still
        if until != math.inf:
            for j in self.jobs:
                j.left = left[id(j)]


class _Roles:
    """Each role's unfinished jobs after its first, in the order issued: only a role's first
    unfinished job can run, so a sharing rule steps through the roles' first jobs alone, and a role's
    next job joins them when its first ends (a step costs its running jobs, not every outstanding one)."""

    def __init__(self, rest: dict, order: dict):
        self.rest, self.order = rest, order

    @staticmethod
    def of(jobs: list[Job], left: dict, placed: set) -> tuple["_Roles", list]:
        """The roles of `jobs` (unfinished: work left in `left`), and a heap (ready, issue order, job)
        of the roles' first jobs not in `placed` (ids)."""
        rest: dict = {}
        order = {id(j): i for i, j in enumerate(jobs)}
        waiting = []
        for j in jobs:
            if left[id(j)] > _DONE:
                if j.key in rest:
                    rest[j.key].append(j)
                else:
                    rest[j.key] = collections.deque()
                    if id(j) not in placed:
                        waiting.append((j.ready, order[id(j)], j))
        heapq.heapify(waiting)
        return _Roles(rest, order), waiting

    def next_after(self, job: Job, waiting: list, at: Optional[float] = None) -> Optional[Job]:
        """`job` ended: its role's next job, if any, joins `waiting`; with `at` (the instant it ended), a
        next job already ready then is returned instead, to go on without waiting."""
        rest = self.rest[job.key]
        if rest:
            j = rest.popleft()
            if at is not None and j.ready <= at:
                return j
            heapq.heappush(waiting, (j.ready, self.order[id(j)], j))
        return None


def linux_slice_s(n: int) -> float:
    """Linux's default time slice on `n` cores (EEVDF's base_slice, CFS's min_granularity): 0.75 ms x
    (1 + log2(min(n, 8)))."""
    return 0.75e-3 * (1 + int(math.log2(min(n, 8))))


class _Turns:
    """Round robin's state at an instant: the jobs on the cores (with when their turn ends), the woken jobs
    waiting for a core, the jobs waiting after their slice ran out, each job's work left, and the roles
    whose job ended at `ended`'s instant within their turn (their next job, issued then, keeps the core)."""

    def __init__(self, left: dict, running: list, queue: list, back: list, ended: Optional[dict] = None):
        self.left, self.running, self.queue, self.back = left, running, queue, back
        self.ended = ended or {}  # role: (when its job ended, when its turn ends)

    def copy(self) -> "_Turns":
        return _Turns(dict(self.left), [list(r) for r in self.running], list(self.queue), list(self.back),
                      dict(self.ended))


class TurnCores:
    """`n` cores shared in turns (sim.sharing: rr), as Linux's scheduler (EEVDF) shares them among
    threads of equal weight: a role runs for at most a slice (linux_slice_s) each time it is picked; a
    role whose next job is ready when its job ends has not blocked and keeps its core for the rest of
    that slice; a role that wakes (its job ready after its last one ended) waits behind the roles woken
    before it but ahead of those whose slice ran out (EEVDF places a woken thread at the runqueue's
    average virtual runtime, where a thread that has just used its slice is not eligible again);
    a role whose slice ran out goes behind every waiting role (alone, it runs again). A job shorter than
    a slice runs to its end as under first come first served; longer ones share the cores as under
    processor sharing. Ends move later as jobs are issued after them (the module's docstring). Not
    thread-safe."""

    def __init__(self, n: int, slice_s: Optional[float] = None, tick_s: float = 0.0):
        self.n, self.slice_s = n, linux_slice_s(n) if slice_s is None else slice_s
        self.tick_s = tick_s
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
            self.state.ended = {k: e for k, e in self.state.ended.items() if e[0] >= self.at}
        job = Job(key, max(ready, self.at), busy_s)
        self.jobs.append(job)
        self.state.left[id(job)] = busy_s
        self.busy_s += busy_s
        ended = self.state.ended.pop(key, None)
        if (ended is not None and ended[0] == self.at and job.ready <= self.at
                and len(self.state.running) < self.n):  # issued as its last job ended: it never blocked
            self.state.running.append([job, ended[1]])
        self._turns(self.state.copy(), math.inf)
        return job

    def run(self, ready: float, busy_s: float, now: float = 0.0, key: Optional[Hashable] = None) -> float:
        return self.book(ready, busy_s, now, object() if key is None else key).end

    def _preempt_at(self, t: float) -> float:
        """A role picked at `t` runs until its slice is used, checked at the first tick after (no tick: then)."""
        end = t + self.slice_s
        return math.ceil(end / self.tick_s - 1e-9) * self.tick_s if self.tick_s else end

    def _turns(self, state: _Turns, until: float) -> None:
        """Runs `state` from `self.at` to `until` (inf: until every job ends, their ends written)."""
        t, left = self.at, state.left
        placed = {id(r[0]) for r in state.running} | {id(j) for j in state.queue} | {id(j) for j in state.back}
        roles, waiting = _Roles.of(self.jobs, left, placed)
        running, queue, back, ended = state.running, state.queue, state.back, state.ended
        while t < until:
            if waiting and waiting[0][0] <= t:
                woken = []
                while waiting and waiting[0][0] <= t:
                    woken.append(heapq.heappop(waiting))
                woken.sort(key=_issued)
                queue += [j for _, _, j in woken]
            while (queue or back) and len(running) < self.n:
                running.append([(queue or back).pop(0), self._preempt_at(t)])
            later = waiting[0][0] if waiting else math.inf
            if not running:
                if later == math.inf:
                    break
                t = min(later, until)
                continue
            dt = min(later - t, until - t)
            for j, at in running:
                dt = min(dt, left[id(j)], at - t)
            t += dt
            keep = []
            for r in running:
                j = r[0]
                left[id(j)] -= dt
                if left[id(j)] <= _DONE:
                    j.end = t
                    following = roles.next_after(j, waiting, t)
                    if following is not None and r[1] - t > _DONE:
                        keep.append([following, r[1]])  # its role goes on in the same slice
                    elif following is not None:
                        back.append(following)
                    elif r[1] - t > _DONE:
                        ended[j.key] = (t, r[1])
                elif r[1] - t <= _DONE:
                    back.append(j)  # its slice is over: behind whoever is waiting (alone, it runs again)
                else:
                    keep.append(r)
            running = keep
        state.running, state.queue, state.back = running, queue, back


def _issued(entry: tuple) -> int:
    return entry[1]


def cores_for(sharing: str, n: int, tick_s: float = 0.0):
    """A host's cores under `sim.sharing`; `tick_s`: its kernel's scheduler tick (rr; 0: none)."""
    if sharing == "rr":
        return TurnCores(n, tick_s=tick_s)
    return {"ps": SharedCores}.get(sharing, Cores)(n)


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
