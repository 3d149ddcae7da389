"""How fast each worker steps, smoothed: the time per step a paced method's rounds follow
(DyLU, psgd.core.local_methods.dylu), as a worker measures its own and a shard its workers'."""
from __future__ import annotations

import math

__all__ = ["SPEED_SMOOTHING", "smoothed", "StepSpeeds"]

SPEED_SMOOTHING = 0.3  # weight of the newest round in a time per step: one preempted round must not halve H


def smoothed(previous: float, new: float) -> float:
    """An exponentially weighted time per step (the first measurement as it is)."""
    return new if previous <= 0 else previous + SPEED_SMOOTHING * (new - previous)


class StepSpeeds:
    """Each worker's smoothed time per training step, as its pushes report it (a shard's view)."""

    def __init__(self):
        self._per_step: dict[int, float] = {}

    def observe(self, rank: int, step_s: float, steps: int) -> None:
        if 0 < step_s < math.inf and steps > 0:
            self._per_step[rank] = smoothed(self._per_step.get(rank, 0.0), step_s / steps)

    def forget(self, rank: int) -> None:
        self._per_step.pop(rank, None)

    def fastest(self) -> float:
        return min(self._per_step.values(), default=0.0)
