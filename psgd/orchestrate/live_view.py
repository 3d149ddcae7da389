"""What `psgd ctl RUN_DIR status` shows: each worker's clock, when a shard last heard
from it, the pull it has parked (if any), and whom the parked pulls wait on; each
shard's updates and parked pulls. Built from the shards' status replies
(psgd.orchestrate.control.live_status), which read and never change the run.

A parked pull waits on the quorum ranks at the slowest clock: a barrier or a bound
releases nothing until they move (a frozen or stopped worker among them holds
everyone behind it, until the shards drop it after cluster.timeout_s)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["WorkerView", "ShardView", "LiveView", "live_view"]


@dataclass(frozen=True)
class WorkerView:
    rank: int
    clock: int                      # the highest any shard has seen from it
    last_heard_s: Optional[float]   # the most recent any shard heard from it (None: never)
    parked_clock: Optional[int]     # the clock its parked pull asks for (None: none parked)
    parked_s: float                 # how long it has been parked, the longest over shards


@dataclass(frozen=True)
class ShardView:
    shard: int
    updates: int
    updates_per_s: Optional[float]  # between the two looks (None: looked once)
    parked: int


@dataclass(frozen=True)
class LiveView:
    workers: list[WorkerView]
    shards: list[ShardView]
    waited_on: list[int]            # quorum ranks at the slowest clock while pulls are parked ([]: nobody waits)
    slowest_clock: Optional[int]

    def as_dict(self) -> dict:
        from dataclasses import asdict
        return asdict(self)


def live_view(statuses: list[dict], before: Optional[list[dict]] = None, interval_s: float = 0.0) -> LiveView:
    """The run's live view from every shard's status reply (`before`: the replies
    `interval_s` earlier, for each shard's updates/s)."""
    if not statuses:
        raise ValueError("no shard answered")
    n = max(len(s.get("clocks") or []) for s in statuses)
    quorum = sorted(set().union(*(s.get("quorum") or [] for s in statuses)))
    clocks = [max((s["clocks"][r] for s in statuses if r < len(s.get("clocks") or [])), default=0) for r in range(n)]
    parked: dict[int, tuple[int, float]] = {}
    for s in statuses:
        for p in s.get("parked") or []:
            clock, waited = parked.get(p["rank"], (p["clock"], 0.0))
            parked[p["rank"]] = (max(clock, p["clock"]), max(waited, p["waiting_s"]))
    workers = []
    for r in range(n):
        heard = [s["last_heard_s"][r] for s in statuses if r < len(s.get("last_heard_s") or [])
                 and s["last_heard_s"][r] is not None]
        clock, waited = parked.get(r, (None, 0.0))
        workers.append(WorkerView(r, clocks[r], min(heard) if heard else None, clock, waited))
    slowest = min((clocks[r] for r in quorum), default=None)
    waited_on = [r for r in quorum if clocks[r] == slowest and r not in parked] if parked else []
    rates = [None] * len(statuses)
    if before is not None and len(before) == len(statuses) and interval_s > 0:
        rates = [(int(s.get("version", 0)) - int(b.get("version", 0))) / interval_s for s, b in zip(statuses, before)]
    shards = [ShardView(int(s.get("shard", i)), int(s.get("version", 0)), rate, len(s.get("parked") or []))
              for i, (s, rate) in enumerate(zip(statuses, rates))]
    return LiveView(workers, shards, waited_on, slowest)
