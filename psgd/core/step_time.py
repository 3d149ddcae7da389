"""Step-time variability: each step's compute time times random factors of mean 1.

One definition for both clocks: the simulator multiplies its compute time by
it (psgd.sim.step_times), and a real worker with `workers.device_ms` waits out
its device time drawn from it (workers/device_time.py), so a testbed run and
its simulation take the same device time at every (rank, step).
`step_variability` reads the keys of the `sim:` section that state the
variability (compute_jitter per step, worker_spread per worker).

Lognormal rather than gamma: a step's time on shared hardware is the product of
many small slowdowns (cache misses, scheduling, frequency), which is what a
lognormal describes, and real step times here are right-skewed with a long upper
tail (MNIST-1D on 2 cores: 10th/50th/90th percentiles 14.2/19.1/40.3 ms), which
a gamma of the same CV has less of. Parametrised by its coefficient of variation
c: sigma^2 = ln(1 + c^2), mu = -sigma^2 / 2, so the mean is exactly 1.

Every draw is a pure function of (seed, rank, step) (or (seed, rank) for a
worker's persistent speed): values are drawn in blocks from a numpy Generator
seeded by (seed, rank, block, stream), so the order in which they are asked for
does not matter and the same config and seed give the same times.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["BLOCK", "ComputeJitter", "StepVariability", "WorkerSpread", "lognormal_sigma", "step_variability"]

_STREAM = 0x717E  # keeps these draws apart from the straggler delays' (seed, rank) stream
_SPREAD_STREAM = 0x5BEE
BLOCK = 1024      # draws per Generator: its construction costs ~20 us, a draw well under 1 us


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
        block, i = divmod(step, BLOCK)
        held = self._blocks.get(rank)
        if held is None or held[0] != block:
            rng = np.random.default_rng([self.seed, int(rank), block, _STREAM])
            held = (block, np.exp(self.mu + self.sigma * rng.standard_normal(BLOCK)))
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


class StepVariability:
    """factor(rank, step): rank's persistent speed (WorkerSpread) times its step's jitter."""

    def __init__(self, jitter_cv: float, spread_cv: float, seed: int):
        self.jitter, self.spread = ComputeJitter(jitter_cv, seed), WorkerSpread(spread_cv, seed)
        self._speeds: dict[int, float] = {}  # rank -> its persistent factor, drawn once

    def speed(self, rank: int) -> float:
        """Rank `rank`'s persistent multiplier (1.0 without a spread)."""
        speed = self._speeds.get(rank)
        if speed is None:
            speed = self._speeds[rank] = self.spread.factor(rank)
        return speed

    def factor(self, rank: int, step: int) -> float:
        """The multiplier of rank `rank`'s step number `step` (0-based)."""
        return self.speed(rank) * self.jitter.factor(rank, step)


def step_variability(sim, seed: int) -> StepVariability:
    """The variability the `sim:` section states (`sim.compute_jitter`,
    `sim.worker_spread`, read by attribute so core needs no config import),
    seeded by the run seed."""
    return StepVariability(float(sim.compute_jitter), float(sim.worker_spread), seed)
