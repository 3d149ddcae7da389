"""The virtual cluster's time model (the `sim:` section), in seconds.

A link is a FIFO resource: a message starts when the link is free, occupies
it for bytes / bandwidth, and arrives `latency` later. Each shard has one
link in each direction, shared by every worker that talks to it, so at many
workers the shard's link saturates. A shard serves one request at a time:
a fixed per-request cost plus the apply cost of the fp32 gradient.
"""
from __future__ import annotations

from dataclasses import dataclass

from psgd.config.sim import SimConfig

__all__ = ["Fifo", "TimeModel", "ring_allreduce_s"]

# A shard free for less than this when a request arrives is still awake: a
# request that arrives as the last one ends is served back to back, whatever
# the rounding of the two sums of floats that make those instants.
AWAKE_S = 1e-9


@dataclass
class Fifo:
    """One resource serving one job at a time in arrival order."""
    free_at: float = 0.0

    def occupy(self, ready: float, busy_s: float) -> float:
        """A job ready at `ready` that takes `busy_s`: returns its end."""
        self.free_at = max(ready, self.free_at) + busy_s
        return self.free_at


def ring_allreduce_s(nbytes: int, workers: int, latency_s: float, bytes_per_s: float) -> float:
    """Ring all-reduce: 2(W-1) steps, each sending nbytes / W over one link."""
    if workers <= 1:
        return 0.0
    steps = 2 * (workers - 1)
    return steps * (latency_s + nbytes / workers / bytes_per_s)


@dataclass(frozen=True)
class TimeModel:
    compute_s: float      # one step's forward+backward, after the speed-up
    latency_s: float
    bytes_per_s: float    # link bandwidth
    request_s: float      # shard fixed cost per request
    apply_bytes_per_s: float
    jitter_cv: float = 0.0  # coefficient of variation of each step's compute time
    wake_s: float = 0.0     # shard cost added when a request finds it idle

    @classmethod
    def from_config(cls, sim: SimConfig, compute_ms: float) -> "TimeModel":
        path_us = sum(sim.latency_us if v is None else v for v in (sim.worker_latency_us, sim.shard_latency_us))
        return cls(compute_ms / 1e3 / sim.speedup, path_us / 1e6, sim.bandwidth_gbps * 1e9 / 8,
                   sim.request_us / 1e6, sim.apply_gbytes_per_s * 1e9, sim.compute_jitter, sim.wake_us / 1e6)

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_s

    @staticmethod
    def finds_idle(free_at: float, t: float) -> bool:
        """Whether a request arriving at `t` finds a shard free since `free_at` asleep."""
        return t - free_at > AWAKE_S

    def service_s(self, numel: int, idle: bool = False) -> float:
        """A shard's time for one push of `numel` fp32 values; `idle`: it found the shard idle."""
        return self.request_s + 4 * numel / self.apply_bytes_per_s + (self.wake_s if idle else 0.0)

    def allreduce_s(self, nbytes: int, workers: int) -> float:
        return ring_allreduce_s(nbytes, workers, self.latency_s, self.bytes_per_s)
