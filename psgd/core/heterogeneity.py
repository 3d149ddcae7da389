"""Emulated heterogeneous workers: how long a rank waits after computing a step.

A worker measures its step's compute time c and then sleeps `extra_s(c, t)`
seconds, where t is the time since training started. Three models add up:

- fixed multipliers (`workers.slowdown: {rank: m}`): (m - 1) x c, every step;
- random per-step delays (`workers.delay`), as in Dutta et al. 2018: X x c
  with X drawn from an exponential or a heavy-tailed Pareto (Lomax)
  distribution of the given mean, independently every step;
- transient slowdowns (`workers.transient`): (factor - 1) x c while t is in
  [start_s, start_s + duration_s).

Delays are multiples of the measured compute time, so one config means the
same heterogeneity on a fast and a slow machine. Random delays come from a
numpy Generator seeded by (run seed, rank): the same run seed gives every rank
the same sequence of draws, one per step, in every mode and on every machine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

__all__ = ["DelaySpec", "TransientSpec", "StragglerModel", "DELAY_DISTS", "describe", "delay_spec", "transient_specs",
           "straggler_for"]

DELAY_DISTS = ("exponential", "pareto")
_STREAM = 0x5EED  # keeps these draws independent of any other use of (seed, rank)


@dataclass(frozen=True)
class DelaySpec:
    """Random per-step delay. `mean`: the mean extra delay as a multiple of the
    step's compute time; `shape` (pareto only, > 1 so the mean exists): the
    tail index, smaller = heavier tail (1 < shape <= 2 has infinite variance);
    `ranks`: the ranks delayed (empty: all)."""
    dist: str = "exponential"
    mean: float = 1.0
    shape: float = 1.5
    ranks: tuple[int, ...] = ()

    def __post_init__(self):
        if self.dist not in DELAY_DISTS:
            raise ValueError(f"dist: must be one of {', '.join(DELAY_DISTS)}, got {self.dist!r}")
        if not (self.mean >= 0 and math.isfinite(self.mean)):
            raise ValueError(f"mean: must be a finite number >= 0, got {self.mean}")
        if self.dist == "pareto" and not self.shape > 1:
            raise ValueError(f"shape: a Pareto delay needs shape > 1 (a finite mean), got {self.shape}")
        if any(r < 0 for r in self.ranks):
            raise ValueError(f"ranks: must be >= 0, got {list(self.ranks)}")

    def applies_to(self, rank: int) -> bool:
        return not self.ranks or rank in self.ranks


@dataclass(frozen=True)
class TransientSpec:
    """Rank `rank` runs `factor` times slower during [start_s, start_s + duration_s)
    of training time."""
    rank: int
    start_s: float
    duration_s: float
    factor: float = 4.0

    def __post_init__(self):
        if self.rank < 0:
            raise ValueError(f"rank: must be >= 0, got {self.rank}")
        if self.start_s < 0 or self.duration_s <= 0:
            raise ValueError(f"start_s must be >= 0 and duration_s > 0, got {self.start_s}, {self.duration_s}")
        if self.factor < 1:
            raise ValueError(f"factor: must be >= 1, got {self.factor}")

    def active(self, t: float) -> bool:
        return self.start_s <= t < self.start_s + self.duration_s


@dataclass
class StragglerModel:
    """One rank's delays. Call `extra_s` exactly once per step."""
    rank: int
    seed: int
    slowdown: float = 1.0
    delay: Optional[DelaySpec] = None
    transients: Sequence[TransientSpec] = ()
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self):
        if self.slowdown < 1:
            raise ValueError(f"slowdown: must be >= 1, got {self.slowdown}")
        self._rng = np.random.default_rng([int(self.seed), int(self.rank), _STREAM])
        self.transients = [t for t in self.transients if t.rank == self.rank]
        if self.delay is not None and not self.delay.applies_to(self.rank):
            self.delay = None

    @classmethod
    def for_rank(cls, rank: int, seed: int, slowdown: dict[int, float] | None = None,
                 delay: Optional[DelaySpec] = None, transients: Sequence[TransientSpec] = ()) -> "StragglerModel":
        return cls(rank, seed, (slowdown or {}).get(rank, 1.0), delay, tuple(transients))

    @property
    def active(self) -> bool:
        """Whether this rank is ever delayed (if not, workers skip the sleep)."""
        return self.slowdown > 1 or self.delay is not None or bool(self.transients)

    def draw(self) -> float:
        """One random delay multiple (0 without a delay model)."""
        d = self.delay
        if d is None or d.mean == 0:
            return 0.0
        if d.dist == "exponential":
            return float(self._rng.exponential(d.mean))
        # numpy's pareto is the Lomax distribution (Pareto shifted to start at 0),
        # whose mean is 1 / (shape - 1): scale it to the requested mean.
        return float(self._rng.pareto(d.shape) * d.mean * (d.shape - 1))

    def extra_s(self, compute_s: float, t: float) -> float:
        """Seconds to wait after a step that computed for `compute_s`, at training time t."""
        mult = (self.slowdown - 1.0) + self.draw()
        for tr in self.transients:
            if tr.active(t):
                mult += tr.factor - 1.0
        return max(0.0, mult * compute_s)


def describe(slowdown: dict[int, float], delay: Optional[DelaySpec], transients: Sequence[TransientSpec]) -> str:
    """One line for reports: the heterogeneity setting in words."""
    parts = [f"rank {r} slowed {m:g}x" for r, m in sorted(slowdown.items()) if m > 1]
    if delay is not None and delay.mean > 0:
        who = "every rank" if not delay.ranks else "ranks " + ", ".join(map(str, delay.ranks))
        tail = f" (shape {delay.shape:g})" if delay.dist == "pareto" else ""
        parts.append(f"{who} delayed each step by a random {delay.dist}{tail} multiple of its compute time, "
                     f"mean {delay.mean:g}")
    for tr in transients:
        parts.append(f"rank {tr.rank} slowed {tr.factor:g}x from {tr.start_s:g}s to {tr.start_s + tr.duration_s:g}s")
    return "; ".join(parts) if parts else "no straggler (all workers at their natural speed)"


# --- from the `workers` config section (read by attribute, so core needs no config import) ---

def delay_spec(workers_cfg) -> Optional[DelaySpec]:
    d = getattr(workers_cfg, "delay", None)
    if d is None:
        return None
    return DelaySpec(d.dist, float(d.mean), float(d.shape), tuple(int(r) for r in d.ranks))


def transient_specs(workers_cfg) -> list[TransientSpec]:
    return [TransientSpec(int(t.rank), float(t.start_s), float(t.duration_s), float(t.factor))
            for t in getattr(workers_cfg, "transient", None) or []]


def straggler_for(workers_cfg, rank: int, seed: int) -> StragglerModel:
    """Rank `rank`'s model from `workers.slowdown`, `workers.delay` and `workers.transient`."""
    return StragglerModel.for_rank(rank, seed, dict(getattr(workers_cfg, "slowdown", {}) or {}),
                                   delay_spec(workers_cfg), transient_specs(workers_cfg))
