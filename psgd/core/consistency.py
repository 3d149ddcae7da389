"""Consistency rules (BSP, SSP, ASP), in one place and free of sockets.

A worker's clock counts the pushes it has completed. A shard asks this module
three questions: may this pull be answered now, which deferred pulls can be
released, and (BSP) is a clock's aggregate complete. The shard's event loop
never blocks: pulls that may not be answered yet are parked in DeferredPulls
and released when clocks move.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Collection, Optional

import torch

from psgd.config import PS_MODES

__all__ = ["Mode", "ClockBoard", "DeferredPulls", "BspAggregator", "PushOutcome"]


class Mode(str, Enum):
    """How a shard orders pulls against pushes.

    BSP: a pull at clock c waits until the shard has applied the aggregated
         step of every clock below c (one update per clock).
    SSP: pushes apply on arrival; a pull at clock c waits until the slowest
         quorum worker's clock is at least c - staleness.
    ASP: pushes apply on arrival; pulls never wait.
    """
    BSP = "bsp"
    SSP = "ssp"
    ASP = "asp"


assert tuple(m.value for m in Mode) == PS_MODES, "the shard's modes are the config's parameter-server modes"


class ClockBoard:
    """Per-worker clocks and quorum membership for one shard.

    The quorum is every expected rank that has not left or timed out; a rank
    that has not registered yet is in it (at clock 0), so a run starts in step.
    """

    def __init__(self, mode: Mode, workers: int, staleness: int = 0):
        self.mode = Mode(mode)
        self.workers = workers
        self.staleness = staleness
        self.clocks = [0] * workers
        self.departed = set()

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
        self.clocks[rank] = max(self.clocks[rank], clock + 1)

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

    def pull_ready(self, clock: int, bsp_step: int = 0) -> bool:
        """May a pull from a worker at `clock` be answered now?"""
        if self.mode is Mode.ASP:
            return True
        if self.mode is Mode.BSP:
            return bsp_step >= clock
        low = self.min_clock()
        return low is None or low >= clock - self.staleness


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

    def park(self, token: Any, rank: int, clock: int) -> None:
        self._queue.append(_Parked(token, rank, clock))

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


class PushOutcome(str, Enum):
    BUFFERED = "buffered"    # BSP: waiting for the rest of the clock's gradients
    COMPLETE = "complete"    # BSP: the clock's aggregate is ready to apply
    LATE = "late"            # BSP: the clock was already applied; gradient dropped


class BspAggregator:
    """Sums the gradients of the current clock; averages once the quorum is in.

    A clock completes when (quorum size - backup) members of the current
    quorum have pushed for it; later pushes for it are dropped as LATE (Chen
    et al. 2016). A gradient from a worker that has since left the quorum
    stays in the sum (it was computed on this clock's parameters) but does
    not count toward completion, so a departure never makes a quorum
    member's push arrive "late".
    """

    def __init__(self, numel: int, backup: int = 0, dtype=torch.float32):
        self.step = 0
        self.backup = backup
        self.valid = 0  # contributions that carried a usable gradient
        self._sum = torch.zeros(numel, dtype=dtype)
        self._contributors: set[int] = set()

    def needed(self, quorum_size: int) -> int:
        return max(1, quorum_size - self.backup)

    @property
    def count(self) -> int:
        return len(self._contributors)

    def contributed(self, rank: int) -> bool:
        return rank in self._contributors

    def add(self, rank: int, clock: int, grad: Optional[torch.Tensor], quorum: Collection[int]) -> PushOutcome:
        """Count `rank`'s push for `clock`. grad=None counts the push toward the
        quorum without a gradient (it was rejected), so the clock still completes."""
        if clock < self.step or rank in self._contributors:
            return PushOutcome.LATE
        if clock > self.step:
            # Under BSP no worker can read parameters for a clock beyond the step.
            raise ValueError(f"gradient for clock {clock} while the shard is at step {self.step}")
        if grad is not None:
            self._sum.add_(grad)
            self.valid += 1
        self._contributors.add(rank)
        return self.check(quorum)

    def check(self, quorum: Collection[int]) -> PushOutcome:
        """COMPLETE once enough members of `quorum` have pushed for the current clock."""
        members = sum(1 for r in quorum if r in self._contributors)
        if members and members >= self.needed(len(quorum)):
            return PushOutcome.COMPLETE
        return PushOutcome.BUFFERED

    def take_average(self) -> Optional[torch.Tensor]:
        """The mean of the completed clock's valid gradients (None if it had
        none); advances to the next clock."""
        avg = self._sum / self.valid if self.valid else None
        self._sum.zero_()
        self._contributors.clear()
        self.valid = 0
        self.step += 1
        return avg

    def state_dict(self) -> dict:
        """The in-progress clock, for shard snapshots."""
        return {"step": self.step, "valid": self.valid, "sum": self._sum.clone(),
                "contributors": sorted(self._contributors)}

    def load_state_dict(self, sd: dict) -> None:
        self.step, self.valid = int(sd["step"]), int(sd["valid"])
        self._sum.copy_(sd["sum"])
        self._contributors = set(sd["contributors"])
