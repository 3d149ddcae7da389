"""The `local:` section: local updates (local SGD, GEO-SGD, DiLoCo).

With `steps: H > 0` every worker takes H steps with its own inner optimizer
(the `optimizer` section, or the torch optimizer handed to psgd.Optimizer) and
then pushes the change in its parameters, start - end, instead of a gradient.
The shards treat that delta as the gradient of an outer SGD step whose rate,
momentum and Nesterov flag are set here; the consistency mode says when an
outer step happens (bsp: one averaged delta per worker per round; asp: each on
arrival, i.e. GEO-SGD; ssp: rounds bounded by the staleness). The rate is for the
mean of the workers' deltas: a delta applied alone (ssp, asp) takes its share,
outer_lr / workers (psgd.core.local_updates.outer_optimizer). Outer lr 1 and no
momentum is plain local SGD; DiLoCo (Douillard et al. 2023) uses 0.7 with
Nesterov momentum 0.9.
"""
from __future__ import annotations

from dataclasses import dataclass

from psgd.config.loader import check as _check

__all__ = ["LocalConfig", "MAX_LOCAL_STEPS"]

MAX_LOCAL_STEPS = 1_000_000  # rounds of more steps than this never push within any run's budget


@dataclass(frozen=True)
class LocalConfig:
    steps: int = 0               # H: inner steps per push; 0 = off (every step pushes its gradient)
    # DyLU (Liu et al. 2024): a worker whose steps take k times the fastest worker's takes steps / k
    # steps per round, so that slow and fast workers' rounds last about as long
    dynamic: bool = False
    outer_lr: float = 1.0        # the shards' outer step rate, for the mean of the workers' deltas
    outer_momentum: float = 0.0  # momentum of the outer SGD step
    outer_nesterov: bool = False  # Nesterov form of the outer momentum
    # Asynchronous modes: the outer momentum moves once per `cluster.workers` deltas, on their
    # mean; each delta in between is applied at outer_lr / workers (Liu et al. 2024)
    delayed_nesterov: bool = False
    # Eager outer step (after Kale et al. 2025): a worker pushes its delta and goes on with its next
    # round at once, from the latest parameters it has minus its own delta; the round's outer update
    # is folded in one round later, when its reply is collected (psgd/workers/local_rounds.py)
    eager: bool = False

    def __post_init__(self):
        _check(0 <= self.steps <= MAX_LOCAL_STEPS, "steps", f"must be in 0..{MAX_LOCAL_STEPS}, got {self.steps}")
        _check(self.outer_lr > 0, "outer_lr", f"must be > 0, got {self.outer_lr}")
        _check(0 <= self.outer_momentum < 1, "outer_momentum", f"must be in [0, 1), got {self.outer_momentum}")
        _check(not self.outer_nesterov or self.outer_momentum > 0, "outer_nesterov", "needs outer_momentum > 0")
        _check(not self.delayed_nesterov or self.outer_momentum > 0, "delayed_nesterov",
               "needs outer_momentum > 0")
        _check(not self.eager or self.steps > 0, "eager", "needs local updates (steps > 0)")

    @property
    def enabled(self) -> bool:
        return self.steps > 0
