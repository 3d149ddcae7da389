"""Per-worker clocks, the quorum, and the pulls waiting for the clocks: bookkeeping
without a rule. Which pull may be answered is decided in psgd.core.modes.policy.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["ClockBoard", "DeferredPulls"]


class ClockBoard:
    """Per-worker clocks and quorum membership for one shard.

    The quorum is every expected rank that has not left or timed out; a rank
    that has not registered yet is in it (at clock 0), so a run starts in step.
    `members`: how many ranks the run starts with (elastic workers: the range's
    min); the ranks above start outside the quorum and enter it when they
    register, at the slowest member's clock (`join`), so nobody waits for them.
    """

    def __init__(self, workers: int, members: Optional[int] = None):
        self.workers = workers
        self.clocks = [0] * workers
        self.departed = range(workers if members is None else members, workers)

    @property
    def departed(self) -> frozenset:
        """Ranks out of the quorum (change it through join/depart, or assign a new set)."""
        return self._departed

    @departed.setter
    def departed(self, ranks) -> None:
        # The members are kept as a tuple: min_clock and quorum run on every
        # push and pull, and rebuilding them there costs O(workers) in Python.
        self._departed = frozenset(ranks)
        self._members = tuple(r for r in range(self.workers) if r not in self._departed)

    def join(self, rank: int, at: Optional[int] = None) -> int:
        """(Re)admit a rank and return the clock it pushes next.

        `at` (BSP: the step being aggregated) fixes that clock. Otherwise a rank
        that had left the quorum comes back at the slowest member's clock, so
        nobody waits for it; a first registration, or a member re-registering
        because its shard or its own process restarted, keeps its clock, since
        moving it ahead would skip clocks it has not pushed. A rank's recorded
        clock never moves backwards."""
        if rank in self.departed:
            self.departed = self.departed - {rank}
            others = [self.clocks[r] for r in self.quorum() if r != rank]
            if others and at is None:
                self.clocks[rank] = max(self.clocks[rank], min(others))
        if at is None:
            return self.clocks[rank]
        self.clocks[rank] = max(self.clocks[rank], at)
        return at

    def depart(self, rank: int) -> bool:
        """Remove a rank from the quorum; False if it had already left."""
        if rank in self.departed:
            return False
        self.departed = self.departed | {rank}
        return True

    def advance(self, rank: int, clock: int) -> None:
        """A push for `clock` completed: the rank is now at clock + 1."""
        if clock >= self.clocks[rank]:  # once per push: a comparison, not a max() call
            self.clocks[rank] = clock + 1

    def skip_to(self, rank: int, clock: int) -> None:
        """Move a rank that fell behind forward to `clock` (BSP backup workers)."""
        self.clocks[rank] = max(self.clocks[rank], clock)

    def quorum(self) -> list[int]:
        return list(self._members)

    def min_clock(self) -> Optional[int]:
        if not self._departed:  # the common case: one C-level pass over the list
            return min(self.clocks) if self.clocks else None
        return min(map(self.clocks.__getitem__, self._members)) if self._members else None

    def gap(self, rank: int) -> int:
        """How far `rank` runs ahead of the slowest quorum worker."""
        low = self.min_clock()
        return 0 if low is None else max(0, self.clocks[rank] - low)


@dataclass
class _Parked:
    token: Any
    rank: int
    clock: int


class DeferredPulls:
    """Pulls waiting for the clocks to allow them, released in arrival order."""

    def __init__(self):
        self._queue: deque[_Parked] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def park(self, token: Any, rank: int, clock: int) -> Optional[Any]:
        """Park a pull. A worker waits on one pull per shard, so a newer pull of the same
        rank (a resend after a timeout) replaces the parked one, whose token is returned:
        its requester has stopped listening for it. At most one pull per rank is kept."""
        old = next((p for p in self._queue if p.rank == rank), None)
        if old is not None:
            self._queue.remove(old)
        self._queue.append(_Parked(token, rank, clock))
        return None if old is None else old.token

    def release(self, ready: Callable[[int, int], bool]) -> list[Any]:
        """Remove and return (in arrival order) the tokens whose (rank, clock) is ready."""
        out, keep = [], deque()
        for p in self._queue:
            if ready(p.rank, p.clock):
                out.append(p.token)
            else:
                keep.append(p)
        self._queue = keep
        return out

    def count(self, rank: int) -> int:
        return sum(1 for p in self._queue if p.rank == rank)

    def drop_rank(self, rank: int) -> list[Any]:
        """Forget a rank's parked pulls (it re-registered); returns their tokens."""
        gone = [p.token for p in self._queue if p.rank == rank]
        self._queue = deque(p for p in self._queue if p.rank != rank)
        return gone
