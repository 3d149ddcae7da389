"""The `consistency.quorum` section: quorum merging of local-update rounds (bsp).

A shard merges a round once `size` of the quorum's workers have pushed their deltas
for it, after waiting a grace window for the rest: `grace_s` seconds, or `auto`:
the `quantile` of the recent latecomers' lags (seconds after the size-th delta)
that are at most `grace_max_s`, and at least `grace_min_s` (psgd.core.modes.quorum).
Each delta is weighted by the examples it carries; a delta that misses its round's
merge goes into the next one, counted (Decoupled DiLoCo, arXiv 2604.21428).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

from psgd.config.loader import check as _check
from psgd.config.loader import int_max

__all__ = ["QuorumConfig", "MAX_GRACE_S"]

MAX_GRACE_S = 86_400.0  # a day: longer is a run that never merges without every worker


@dataclass(frozen=True)
class QuorumConfig:
    # q: merge a round once q workers' deltas are in (at most cluster.workers; fewer workers
    # in the quorum after a departure: all of them)
    size: int = field(default=1, metadata=int_max(1_000_000))
    # then wait this long for the rest (0: merge at the q-th); auto: adapt from recent arrivals
    grace_s: Union[float, Literal["auto"]] = 0.0
    quantile: float = 0.9        # auto: the quantile of the recent latecomers' lags the window covers
    grace_min_s: float = 0.0     # auto: the shortest window
    grace_max_s: float = 1.0     # auto: the longest; a lag beyond it is a straggler the window gives up on
    window: int = field(default=32, metadata=int_max(100_000))  # auto: the lags remembered

    def __post_init__(self):
        _check(self.size >= 1, "size", f"must be >= 1, got {self.size}")
        _check(self.grace_s == "auto" or 0 <= self.grace_s <= MAX_GRACE_S, "grace_s",
               f"must be seconds in [0, {MAX_GRACE_S:g}] or auto, got {self.grace_s}")
        _check(0 < self.quantile <= 1, "quantile", f"must be in (0, 1], got {self.quantile}")
        _check(0 <= self.grace_min_s <= MAX_GRACE_S, "grace_min_s",
               f"must be seconds in [0, {MAX_GRACE_S:g}], got {self.grace_min_s}")
        _check(self.grace_min_s <= self.grace_max_s <= MAX_GRACE_S, "grace_max_s",
               f"must be in [grace_min_s ({self.grace_min_s:g}), {MAX_GRACE_S:g}], got {self.grace_max_s}")
        _check(self.window >= 1, "window", f"must be >= 1, got {self.window}")

    @property
    def adaptive(self) -> bool:
        return self.grace_s == "auto"
