"""The discrete-event clock's parts: the kinds of event, the heap they wait in
(ordered by time, then a tie, then the order scheduled) and the shape of the
records a simulated run writes."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Optional

from psgd.config import Role
from psgd.runtime.event_names import Event
from psgd.sim.cores import Due

__all__ = ["EventQueue", "Kind", "SimResult", "event"]


class Kind(IntEnum):
    STEP_DONE = 0     # a worker finished computing (and any straggler delay): send its pushes
    ARRIVE = 1        # a push reached its shard's queue
    SERVED = 2        # the shard finished serving a push
    REPLY = 3         # a pull reply reached its worker
    EVALUATE = 4      # the evaluator scores the shards' parameters
    LOCAL_DONE = 5    # local updates: a worker finished an inner step that sends nothing
    DEADLINE = 6      # a shard's quorum grace window closes (consistency.quorum)
    KILL = 7          # psgd.sim.faults: a planned or stated kill
    BACK = 8          # a killed process is running again (a worker registers, a shard serves)
    EXPIRE = 9        # the shards drop workers silent for cluster.timeout_s
    RESEND = 10       # a worker's request to a shard timed out (cluster.request_timeout_s)
    REJOIN = 11       # a shard's not_registered reached the worker: it registers again
    REPEAT = 12       # the re-registered worker repeats its request to every shard
    IN_HAND = 13      # hosts sharing their cores: a worker decoded its replies and recorded its step


class EventQueue:
    def __init__(self):
        self._heap: list = []
        self._n = 0

    def put(self, t: float, kind: Kind, data: Any, tie: float = 0.0, due: Optional[Due] = None) -> None:
        """`tie`: the order among events at the same `t` (lower first; equal: as scheduled); `due`: the
        CPU job the event follows when its end may still move later (psgd.sim.cores, processor sharing)."""
        heapq.heappush(self._heap, (t, tie, self._n, kind, data, due if due is not None and due.moves else None))
        self._n += 1

    def pop(self) -> tuple[float, Kind, Any]:
        """The next event; one whose job was slowed by jobs issued after it goes back, to its new time."""
        while True:
            t, tie, _, kind, data, due = heapq.heappop(self._heap)
            if due is None or due.at <= t:
                return t, kind, data
            self.put(due.at, kind, data, tie, due)

    def __len__(self) -> int:
        return len(self._heap)


@dataclass
class SimResult:
    evals: list[dict] = field(default_factory=list)   # the eval events, in simulated time
    end_s: float = 0.0                                 # simulated seconds the run took
    steps: int = 0                                     # worker steps completed


def event(t: float, role: Role, index: int, name: Event, **fields) -> dict:
    """One record in the shape psgd.runtime.events writes (times in simulated seconds)."""
    return {"t": round(t, 6), "role": role, "index": index, "event": name, **fields}
