"""Quorum merging (`consistency.quorum`, bsp with local updates): a shard merges a
round once q of its quorum's deltas are in and the grace window for the rest has
passed, weighting each delta by the examples it carries; a delta that misses its
round's merge goes into the next one (Decoupled DiLoCo, arXiv 2604.21428).

Two parts: `QuorumRule`, the consistency rule (time-free, like every mode: it says
whether q are in and merges when told), and `GraceWindow`, which holds the
instants (the shard's clock, or the virtual cluster's) and says when the window
closes. With q = W and no grace the rule is bsp's, bit for bit: equal weights
merge as bsp averages, sum / count.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Collection, Optional

import torch

from psgd.config.quorum import QuorumConfig
from psgd.core.clocks import ClockBoard
from psgd.core.modes.base import Counted, Update
from psgd.core.modes.bsp import Bsp

__all__ = ["QuorumMerge", "QuorumRule", "GraceWindow", "grace_for"]


class QuorumMerge:
    """The deltas of the round in progress: summed, and the ranks on time for it.
    Weights: while every delta carries the same, the sum is plain and the merge is
    sum / count (bsp's arithmetic); once one differs, the sum is rescaled to
    sum(w_i * d_i) and the merge is that / sum(w_i)."""

    def __init__(self, numel: int, dtype=torch.float32):
        self.step = 0                      # the round being merged: every round below it is applied
        self._sum = torch.zeros(numel, dtype=dtype)
        self._weights: list[float] = []    # of the deltas in the sum
        self._weighted = False             # the sum holds w_i * d_i
        self._on_time: set[int] = set()    # ranks that pushed for `step` (rejected pushes too)
        self.carried = 0                   # deltas in the sum that were late for their own round
        self._last_round: dict[int, int] = {}  # rank -> the highest round it pushed a delta for

    def contributed(self, rank: int) -> bool:
        return rank in self._on_time

    def repeats(self, rank: int, round_: int) -> bool:
        """`rank` already pushed for `round_` or a later one (under another seq: its successor
        after a restart, or a shard it reached before dying): counting it again would weigh
        the rank's round twice."""
        return self._last_round.get(rank, -1) >= round_

    def pushed(self, rank: int, round_: int) -> None:
        self._last_round[rank] = max(self._last_round.get(rank, -1), round_)

    def members_in(self, quorum: Collection[int]) -> int:
        return sum(1 for r in quorum if r in self._on_time)

    def add(self, rank: Optional[int], grad: Optional[torch.Tensor], weight: float) -> None:
        """A delta for the round in progress (`rank`: on time; None: carried from an
        earlier round). grad None: a rejected push, counted toward the quorum only."""
        if rank is not None:
            self._on_time.add(rank)
        else:
            self.carried += 1
        if grad is None:
            return
        if self._weights and not self._weighted and weight != self._weights[0]:
            self._sum.mul_(self._weights[0])
            self._weighted = True
        if self._weighted:
            self._sum.add_(grad, alpha=weight)
        else:
            self._sum.add_(grad)
        self._weights.append(weight)

    def take(self) -> Optional[torch.Tensor]:
        """The round's weighted mean (None: no usable delta); moves on to the next round."""
        if not self._weights:
            mean = None
        elif self._weighted:
            mean = self._sum / math.fsum(self._weights)
        else:
            mean = self._sum / len(self._weights)
        self._sum.zero_()
        self._weights, self._weighted, self._on_time, self.carried = [], False, set(), 0
        self.step += 1
        return mean

    def state_dict(self) -> dict:
        return {"quorum_step": self.step, "sum": self._sum.clone(), "weights": list(self._weights),
                "weighted": self._weighted, "on_time": sorted(self._on_time), "carried": self.carried,
                "last_round": sorted(self._last_round.items())}

    def load_state_dict(self, sd: dict) -> None:
        if "quorum_step" not in sd:
            raise ValueError("the snapshot was made without consistency.quorum")
        self.step = int(sd["quorum_step"])
        self._sum.copy_(sd["sum"])
        self._weights = [float(w) for w in sd["weights"]]
        self._weighted = bool(sd["weighted"])
        self._on_time = set(sd["on_time"])
        self.carried = int(sd["carried"])
        self._last_round = {int(r): int(c) for r, c in sd.get("last_round", [])}  # older snapshots: none


class QuorumRule(Bsp):
    """bsp's pulls (a pull at clock c waits for round c - 1's merge) over a QuorumMerge.
    Not a mode of its own (no MODE here): the policy picks it for bsp with a quorum."""

    def __init__(self, board: ClockBoard, numel: int, quorum: QuorumConfig):
        super().__init__(board, numel)
        self.aggregator = QuorumMerge(numel)
        self.size = quorum.size
        self.waits = quorum.adaptive or quorum.grace_s > 0  # a window between the q-th delta and the merge
        self._closing = False  # the window closed: merge once q are in

    def needed(self) -> int:
        """Deltas that make a quorum: q, or every member while fewer remain."""
        return max(1, min(self.size, len(self.board.quorum())))

    def reached(self) -> bool:
        """q members have pushed for the round in progress."""
        return self.aggregator.members_in(self.board.quorum()) >= self.needed()

    def count(self, rank: int, clock: int, grad: Optional[torch.Tensor], staleness: int,
              weight: float = 1.0) -> Counted:
        agg = self.aggregator
        if agg.repeats(rank, clock):  # bsp's aggregator answers the same: LATE
            self.board.skip_to(rank, agg.step + int(agg.contributed(rank)))
            return Counted(late=True)
        agg.pushed(rank, clock)
        if clock < agg.step:  # its round was merged without it: it goes into this one
            agg.add(None, grad, weight)
            self.board.skip_to(rank, agg.step + int(agg.contributed(rank)))
            if grad is not None:
                self._staleness.append(staleness)
            return Counted(carried=True)
        agg.add(rank, grad, weight)
        if grad is not None:
            self._staleness.append(staleness)
        return Counted()

    def state_dict(self) -> dict:
        return {**self.aggregator.state_dict(), "closing": self._closing}

    def load_state_dict(self, sd: Optional[dict]) -> None:
        if sd is not None:
            self.aggregator.load_state_dict(sd)
            self._closing = bool(sd["closing"])

    def close(self) -> None:
        """The grace window passed: merge as soon as q are in (now, if they are)."""
        self._closing = True

    def due(self) -> Optional[Update]:
        quorum = self.board.quorum()
        agg = self.aggregator
        everyone = bool(quorum) and agg.members_in(quorum) == len(quorum)
        if not (everyone or (self.reached() and (self._closing or not self.waits))):
            return None
        self._closing = False
        staleness, self._staleness = self._staleness, []
        return Update(agg.take(), staleness)


def grace_for(quorum: QuorumConfig, lags: Collection[float]) -> float:
    """The grace window in force. Fixed: grace_s. auto: the `quantile` (nearest rank) of
    the recent lags at most grace_max_s (a later delta is a straggler no window in
    bounds would have caught), clamped to [grace_min_s, grace_max_s]; none: grace_min_s."""
    if not quorum.adaptive:
        return float(quorum.grace_s)
    catchable = sorted(lag for lag in lags if lag <= quorum.grace_max_s)
    if not catchable:
        return quorum.grace_min_s
    at = max(0, math.ceil(quorum.quantile * len(catchable)) - 1)
    return min(quorum.grace_max_s, max(quorum.grace_min_s, catchable[at]))


class GraceWindow:
    """When each round reached its quorum, the latecomers' lags after that instant,
    and the deadline of the window open now. Times are whatever clock the caller
    keeps (seconds); nothing here reads one."""

    ROUNDS_KEPT = 64  # a delta later than this many rounds has no lag recorded (it is still merged)

    def __init__(self, quorum: QuorumConfig):
        self.quorum = quorum
        self.lags: deque[float] = deque(maxlen=quorum.window)
        self.reached_at: dict[int, float] = {}   # round -> when its q-th delta arrived
        self.deadline: Optional[float] = None    # when the open window closes
        self.round = -1                          # the round whose window is open
        self.windows = 0                         # windows opened
        self.waited_s = 0.0                      # their lengths in all

    def arrived(self, round_: int, now: float) -> None:
        """A delta of `round_` arrived: after its q-th, its lag is recorded."""
        at = self.reached_at.get(round_)
        if at is not None:
            self.lags.append(max(0.0, now - at))

    def reached(self, round_: int, now: float, waits: bool) -> None:
        """`round_` has its q deltas as of `now` (first call counts); `waits`: open its window."""
        if round_ in self.reached_at:
            return
        self.reached_at[round_] = now
        for old in [r for r in self.reached_at if r <= round_ - self.ROUNDS_KEPT]:
            del self.reached_at[old]
        if waits:
            grace = grace_for(self.quorum, self.lags)
            self.round, self.deadline = round_, now + grace
            self.windows += 1
            self.waited_s += grace

    def merged(self, round_: int) -> None:
        """`round_` was merged: its window, if open, is over."""
        if self.round == round_:
            self.deadline, self.round = None, -1

    def due(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def describe(self) -> dict:
        return {"grace_s": round(grace_for(self.quorum, self.lags), 6), "windows": self.windows,
                "waited_s": round(self.waited_s, 6), "lags_recent": len(self.lags)}
