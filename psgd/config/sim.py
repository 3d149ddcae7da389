"""The `sim:` section: the virtual cluster's time model (psgd.sim)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from psgd.config.loader import check as _check

__all__ = ["SimConfig"]


@dataclass(frozen=True)
class SimConfig:
    # Per-step compute time of one worker (forward + backward). None: measured
    # here from the model's own forward+backward, median of `warmup_steps`.
    compute_ms: Optional[float] = None
    speedup: float = 1.0         # compute time is divided by this (faster hardware)
    warmup_steps: int = 5        # steps timed to measure compute_ms
    latency_us: float = 20.0     # one-way latency of every link
    bandwidth_gbps: float = 25.0  # each link's bandwidth; a shard's link is shared by all its workers
    request_us: float = 30.0     # shard cost per request (benchmarks/scale-commits: ~30 us at 64 workers)
    apply_gbps: float = 15.0     # shard apply rate of fp32 gradient (benchmarks/apply: sgd, 10 MB)
    # Per-step compute jitter: each step's compute time times a lognormal factor
    # of mean 1 and this coefficient of variation, drawn from (seed, rank, step).
    # 0: every step takes compute_ms exactly (psgd.core.step_time says why lognormal).
    compute_jitter: float = 0.0
    # Extra shard time for a request that finds its shard idle (waking it up);
    # requests that queue behind another are served back to back without it. 0: none.
    wake_us: float = 0.0

    def __post_init__(self):
        _check(self.compute_ms is None or self.compute_ms > 0, "compute_ms",
               f"must be > 0 (or null to measure it), got {self.compute_ms}")
        _check(self.speedup > 0, "speedup", f"must be > 0, got {self.speedup}")
        _check(self.warmup_steps >= 1, "warmup_steps", f"must be >= 1, got {self.warmup_steps}")
        _check(self.latency_us >= 0, "latency_us", f"must be >= 0, got {self.latency_us}")
        _check(self.bandwidth_gbps > 0, "bandwidth_gbps", f"must be > 0, got {self.bandwidth_gbps}")
        _check(self.request_us >= 0, "request_us", f"must be >= 0, got {self.request_us}")
        _check(self.apply_gbps > 0, "apply_gbps", f"must be > 0, got {self.apply_gbps}")
        _check(0 <= self.compute_jitter < float("inf"), "compute_jitter",
               f"must be a finite number >= 0 (a coefficient of variation), got {self.compute_jitter}")
        _check(self.wake_us >= 0, "wake_us", f"must be >= 0, got {self.wake_us}")
