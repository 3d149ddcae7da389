"""A stated device time (`workers.device_ms`): each real step lasts at least that long.

The worker computes its gradient for real, then waits until the step's device
time has passed since the step began, as a host that launched its kernels
waits on its accelerator. The device time of rank r's step k is device_ms times
the factor the simulator draws for the same (run seed, r, k)
(psgd.core.step_time), so a testbed run and its simulation share the time
each step spends on the device. The wait is a sleep: it costs no CPU, so with
a device time well above the real compute, a few cores no longer decide how
fast W workers step.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from psgd.core.step_time import StepVariability, step_variability

__all__ = ["DeviceClock"]


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


class DeviceClock:
    """One rank's device times. `hold` blocks; not thread-safe (one training loop)."""

    def __init__(self, device_ms: float, variability: StepVariability, rank: int):
        self.device_s, self.variability, self.rank = device_ms / 1e3, variability, rank

    @classmethod
    def from_config(cls, cfg, rank: int) -> Optional["DeviceClock"]:
        """Rank `rank`'s clock, or None when the config states no device time."""
        if cfg.workers.device_ms is None:
            return None
        return cls(cfg.workers.device_ms, step_variability(cfg.sim, cfg.run.seed), rank)

    def step_s(self, step: int) -> float:
        """The device time of this rank's step `step` (0-based), in seconds."""
        return self.device_s * self.variability.factor(self.rank, step)

    def hold(self, started: float, step: int, wait: Callable[[float], bool] = _sleep) -> float:
        """Waits until step `step`'s device time has passed since `started` (a
        time.perf_counter() reading) and returns the step's compute seconds: the
        device time, or the real compute where that took longer. `wait(s)` sleeps
        for s seconds and returns True to cut the wait short (a stop)."""
        remaining = started + self.step_s(step) - time.perf_counter()
        if remaining > 0:
            wait(remaining)
        return time.perf_counter() - started
