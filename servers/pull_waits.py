"""How long each worker's pulls stayed parked on a shard, and whose request released them.

A pull the consistency mode does not allow yet (a BSP barrier, an SSP bound)
is parked (servers/service.py); the request that moves the clocks on (a push,
a join, a leave) releases it. Charging the wait it ended to that request's rank
says, measured on the shard, whom the others waited on: the figure `psgd
explain` reports, and `psgd ctl RUN_DIR status` shows live. The real shard
and the virtual cluster both keep it, on their own clocks.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["PullWaits"]


class PullWaits:
    def __init__(self, workers: int):
        self._since: dict[int, tuple[int, float]] = {}  # rank -> (clock, when) of its parked pull
        self.held_s = [0.0] * workers       # rank -> seconds its pulls stayed parked
        self.waited_on_s = [0.0] * workers  # rank -> seconds of others' parked pulls its requests ended

    def parked(self, rank: int, clock: int, now: float) -> None:
        since = self._since.get(rank)
        if since is None or since[0] != clock:  # a resend of the same pull keeps its first arrival
            self._since[rank] = (clock, now)

    def released(self, rank: int, now: float, by: Optional[int]) -> float:
        """Seconds the rank's pull stayed parked (0.0 if none was), charged to `by`."""
        since = self._since.pop(rank, None)
        if since is None:
            return 0.0
        held = max(0.0, now - since[1])
        self.held_s[rank] += held
        if by is not None and by != rank:
            self.waited_on_s[by] += held
        return held

    def dropped(self, rank: int) -> None:
        """The rank's parked pull has no reader any more (it left, or joined again)."""
        self._since.pop(rank, None)

    def open(self, now: float) -> list[dict]:
        """The pulls parked now: rank, clock and how long each has waited."""
        return [{"rank": r, "clock": c, "waiting_s": round(now - t, 6)} for r, (c, t) in sorted(self._since.items())]

    def totals(self) -> dict:
        return {"held_s": [round(x, 6) for x in self.held_s], "waited_on_s": [round(x, 6) for x in self.waited_on_s]}
