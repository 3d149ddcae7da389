"""Step-time variability: random factors of mean 1 on a step's compute time, and the seeded
order of simultaneous sends.

Lognormal rather than gamma: a step's time on shared hardware is the product of
many small slowdowns (cache misses, scheduling, frequency), which is what a
lognormal describes, and real step times here are right-skewed with a long upper
tail (MNIST-1D on 2 cores: 10th/50th/90th percentiles 14.2/19.1/40.3 ms), which
a gamma of the same CV has less of. Parametrised by its coefficient of variation
c: sigma^2 = ln(1 + c^2), mu = -sigma^2 / 2, so the mean is exactly 1.

Every draw is a pure function of (seed, rank, step) (or (seed, rank) for a
worker's persistent speed): values are drawn in blocks from a numpy Generator
seeded by (seed, rank, block, stream), so the order in which the engine asks
does not matter and the same config and seed give the same times.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["ComputeJitter", "SendOrder", "WorkerSpread", "lognormal_sigma"]

_STREAM = 0x717E  # keeps these draws apart from the straggler delays' (seed, rank) stream
_SPREAD_STREAM = 0x5BEE
_ORDER_STREAM = 0x0DE5
_BLOCK = 1024     # draws per Generator: its construction costs ~20 us, a draw well under 1 us


def lognormal_sigma(cv: float) -> float:
    """The log-space standard deviation of a lognormal with this coefficient of variation."""
    return math.sqrt(math.log1p(cv * cv))


class ComputeJitter:
    """Multipliers of a step's compute time; `cv` 0 gives exactly 1.0 always."""

    def __init__(self, cv: float, seed: int):
        if not (cv >= 0 and math.isfinite(cv)):
            raise ValueError(f"compute_jitter: must be a finite number >= 0, got {cv}")
        self.cv, self.seed = float(cv), int(seed)
        self.sigma = lognormal_sigma(self.cv)
        self.mu = -self.sigma ** 2 / 2
        self._blocks: dict[int, tuple[int, np.ndarray]] = {}  # rank -> (block index, its factors)

    def factor(self, rank: int, step: int) -> float:
        """The multiplier of rank `rank`'s step number `step` (0-based)."""
        if self.cv == 0:
            return 1.0
        block, i = divmod(step, _BLOCK)
        held = self._blocks.get(rank)
        if held is None or held[0] != block:
            rng = np.random.default_rng([self.seed, int(rank), block, _STREAM])
            held = (block, np.exp(self.mu + self.sigma * rng.standard_normal(_BLOCK)))
            self._blocks[rank] = held
        return float(held[1][i])


class WorkerSpread:
    """Each worker's persistent speed: a lognormal factor of mean 1 and CV `cv`
    drawn once from (seed, rank); `cv` 0 gives exactly 1.0 for every rank."""

    def __init__(self, cv: float, seed: int):
        if not (cv >= 0 and math.isfinite(cv)):
            raise ValueError(f"worker_spread: must be a finite number >= 0, got {cv}")
        self.cv, self.seed = float(cv), int(seed)
        self.sigma = lognormal_sigma(self.cv)

    def factor(self, rank: int) -> float:
        if self.cv == 0:
            return 1.0
        z = np.random.default_rng([self.seed, int(rank), _SPREAD_STREAM]).standard_normal()
        return float(np.exp(-self.sigma ** 2 / 2 + self.sigma * z))


class SendOrder:
    """The order of sends that leave at the same instant: each (rank, step) draws a
    uniform priority; among equal times the lower one goes first. Without it,
    workers in lock-step would queue in rank order at every clock, and BSP's
    backup workers would drop the same ranks forever."""

    def __init__(self, seed: int, stream: int = 0):
        """`stream`: independent orders from one seed (sends, a shard's picks)."""
        self.seed, self.stream = int(seed), _ORDER_STREAM + int(stream)
        self._blocks: dict[int, tuple[int, np.ndarray]] = {}

    def priority(self, rank: int, step: int) -> float:
        block, i = divmod(step, _BLOCK)
        held = self._blocks.get(rank)
        if held is None or held[0] != block:
            held = (block, np.random.default_rng([self.seed, int(rank), block, self.stream]).random(_BLOCK))
            self._blocks[rank] = held
        return float(held[1][i])

    def ranks(self, ranks, step: int) -> list[int]:
        """`ranks` that all send their step `step` at one instant, in the order they leave."""
        return sorted(ranks, key=lambda r: (self.priority(r, step), r))
