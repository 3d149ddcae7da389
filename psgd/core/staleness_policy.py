"""The adaptive SSP bound (`consistency.staleness: auto`): a pure policy.

Choosing the SSP bound s by hand is a trade: too small and fast workers sit
idle whenever one worker is slow; too large and gradients are staler than the
slowness requires. DSSP (Zhao et al., ICDCS 2019) lets the fastest worker run
as many extra iterations as fit before the slowest worker's next push,
predicted from recorded push times. This policy keeps that idea, but turns it
into a bound that every shard computes identically, from numbers that every
shard sees identically.

Input: each worker's step time (compute plus any injected delay, never the
time it waited for a pull), reported by the worker with every push and
recorded per clock. Every shard receives the same pushes, so every shard holds
the same samples for the clocks below its slowest worker's clock.

The rule, evaluated every `every` clocks when the slowest worker reaches
decision clock D, over each member's samples of the clocks [D - window, D)
(members without a sample for every one of those clocks are left out):

1. pace     = the median, over workers, of each worker's median step time
              (the typical worker; robust to one straggler and to outliers);
2. lag      = the largest, over workers, of a worker's upper-quantile step
              time divided by `pace` (a worker that is slow most of the time
              or often delayed shows it in its upper quantile);
3. need     = ceil(lag - 1 - tolerance), at least 0: how many clocks a
              typical worker completes while the laggard finishes one step,
              beyond its own. With bound `need`, typical workers starting
              level never wait during one of the laggard's steps; `tolerance`
              keeps timing noise from asking for a wider bound;
4. target   = need clamped to [staleness_min, staleness_max];
5. widen at once to `target` when it is above the bound in force (waiting
   costs throughput now); narrow by one step only after `patience`
   consecutive decisions asked for less (a lag seen once may come back),
   where "less" is judged with half the tolerance (ceil(lag - 1 - tolerance/2)
   below the bound), a hysteresis band against a lag hovering at a threshold.

The shard applies a new bound at an effective clock far enough ahead that no
shard has answered a pull at that clock yet, so all shards switch at the same
clock (see psgd/core/live_settings.py). The measured staleness of gradients is
logged with every change but is not an input: it depends on the order in which
pushes reach each shard, so using it would let shards disagree on the bound.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import Iterable, Optional

__all__ = ["BoundLimits", "BoundDecision", "StalenessPolicy", "STEP_S_MIN", "STEP_S_MAX"]

# The step times the policy believes: a microsecond to a day. Their ratio stays far from overflow.
STEP_S_MIN = 1e-6
STEP_S_MAX = 86_400.0


@dataclass(frozen=True)
class BoundLimits:
    staleness_min: int = 0
    staleness_max: int = 8
    every: int = 4              # decide every this many clocks of the slowest worker
    window: int = 10            # recent clocks of each worker considered
    quantile: float = 0.9       # a worker's "slow" step time: this quantile of its window
    tolerance: float = 0.5      # a lag below 1 + tolerance steps asks for no extra clock (timing noise)
    patience: int = 2           # consecutive decisions asking for less before narrowing

    def __post_init__(self):
        if self.staleness_min < 0:
            raise ValueError(f"staleness_min must be >= 0, got {self.staleness_min}")
        if self.staleness_max < self.staleness_min:
            raise ValueError(f"staleness_max ({self.staleness_max}) must be >= staleness_min "
                             f"({self.staleness_min})")
        if self.every < 1 or self.window < 2 or self.patience < 1:
            raise ValueError("every and patience must be >= 1 and window >= 2")
        if not 0.5 <= self.quantile <= 1.0 or self.tolerance < 0:
            raise ValueError("quantile must be in [0.5, 1] and tolerance >= 0")

    def clamp(self, bound: int) -> int:
        return min(self.staleness_max, max(self.staleness_min, bound))


@dataclass(frozen=True)
class BoundDecision:
    """What the policy decided at one decision clock, and the measurements behind it."""
    clock: int                  # the decision clock D
    bound: int                  # the bound to be in force (may equal the current one)
    previous: int
    target: int                 # the clamped need before hysteresis
    lag: Optional[float] = None  # laggard's slow step time / typical pace (None: too few samples)
    pace_s: Optional[float] = None
    laggard: Optional[int] = None

    @property
    def changed(self) -> bool:
        return self.bound != self.previous

    def as_event(self) -> dict:
        return {"decided_at_clock": self.clock, "previous": self.previous, "bound": self.bound,
                "target": self.target, "lag": None if self.lag is None else round(self.lag, 4),
                "pace_s": None if self.pace_s is None else round(self.pace_s, 6), "laggard": self.laggard}


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (no interpolation: a sample that was measured)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class StalenessPolicy:
    """Per-shard state of the adaptive bound: step-time samples and the narrowing count.

    `observe` every applied (non-duplicate) push's step time; `decision_due`
    says whether the slowest clock crossed a decision clock; `decide` returns
    the bound for it. Deterministic: the same samples and calls give the same
    decisions on every shard.
    """
    rule: BoundLimits
    workers: int
    _samples: list = field(init=False, repr=False)
    _narrow_votes: int = field(default=0, init=False)
    _last_decision: int = field(default=0, init=False)

    def __post_init__(self):
        # Fast workers run ahead of the decision clock by up to the bound, so
        # keep enough clocks to still hold the whole window below it.
        keep = self.rule.window + self.rule.staleness_max + 64
        self._samples = [deque(maxlen=keep) for _ in range(self.workers)]

    def observe(self, rank: int, clock: int, step_s: float) -> None:
        """Record `rank`'s step time for the gradient of `clock`. Non-positive or
        non-finite times (a client that does not report them) are ignored; others
        are clamped to [STEP_S_MIN, STEP_S_MAX], so no report can overflow the
        medians and ratios below, whatever a client claims."""
        if step_s > 0 and math.isfinite(step_s):
            self._samples[rank].append((clock, min(STEP_S_MAX, max(STEP_S_MIN, float(step_s)))))

    def decision_due(self, min_clock: Optional[int]) -> Optional[int]:
        """The decision clock D if the slowest member's clock reached a multiple of
        `every` beyond the last decision, else None."""
        if min_clock is None:
            return None
        due = (min_clock // self.rule.every) * self.rule.every
        if due > self._last_decision:
            self._last_decision = due
            return due
        return None

    def window_of(self, rank: int, clock: int) -> list[float]:
        low = clock - self.rule.window
        return [s for c, s in self._samples[rank] if low <= c < clock]

    def decide(self, clock: int, current: int, members: Iterable[int]) -> BoundDecision:
        """The bound to use from decision clock `clock` on, given the bound in force."""
        rule = self.rule
        current_c = rule.clamp(current)
        # Only full windows: a worker that (re)joined inside the window waits
        # until it has one sample per clock (its first step after joining is
        # not timed: it may include the wait for the run to start).
        windows = {r: w for r in members if len(w := self.window_of(r, clock)) >= rule.window}
        if len(windows) < 2:  # one worker alone has nobody to wait for: nothing to measure
            self._narrow_votes = 0
            return BoundDecision(clock, current_c, current, current_c)
        pace = median(median(w) for w in windows.values())
        slow = {r: _quantile(w, rule.quantile) / pace for r, w in windows.items()}
        laggard = max(slow, key=lambda r: (slow[r], -r))
        lag = slow[laggard]
        target = rule.clamp(max(0, math.ceil(lag - 1.0 - rule.tolerance)))
        # Narrowing must clear a band of half the tolerance, so a lag that
        # hovers at a threshold does not flip the bound at every decision.
        keep = rule.clamp(max(0, math.ceil(lag - 1.0 - rule.tolerance / 2)))
        bound = current_c
        if target > current_c:
            bound, self._narrow_votes = target, 0
        elif keep < current_c:
            self._narrow_votes += 1
            if self._narrow_votes >= rule.patience:
                bound, self._narrow_votes = current_c - 1, 0
        else:
            self._narrow_votes = 0
        return BoundDecision(clock, bound, current, target, lag, pace, laggard)
