"""The `workers:` section: the device, the data loader, the heterogeneity models and overlap."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from psgd.config.loader import check as _check
from psgd.config.loader import int_max
from psgd.config.modes import Overlap

__all__ = ["DelayConfig", "LoaderConfig", "TransientConfig", "WorkersConfig"]


@dataclass(frozen=True)
class LoaderConfig:
    # The torch DataLoader that feeds each worker its share of the train split.
    # loader processes per worker (for Datasets that load examples on access)
    num_workers: int = field(default=0, metadata=int_max(256))
    pin_memory: bool = True      # pinned batches, on cuda only

    def __post_init__(self):
        _check(self.num_workers >= 0, "num_workers", f"must be >= 0, got {self.num_workers}")


@dataclass(frozen=True)
class DelayConfig:
    # Random extra delay after every step (Dutta et al. 2018), as a multiple of
    # the step's compute time, drawn per step from a generator seeded by
    # (run.seed, rank) (psgd.core.heterogeneity).
    dist: Literal["exponential", "pareto"] = "exponential"
    mean: float = 1.0            # mean delay / compute time
    shape: float = 1.5           # pareto tail index (> 1); smaller = heavier tail
    ranks: list[int] = field(default_factory=list)  # ranks delayed; empty = all

    def __post_init__(self):
        _check(self.mean >= 0, "mean", f"must be >= 0, got {self.mean}")
        _check(self.dist != "pareto" or self.shape > 1, "shape", f"a pareto delay needs shape > 1, got {self.shape}")
        _check(all(r >= 0 for r in self.ranks), "ranks", "ranks must be >= 0")


@dataclass(frozen=True)
class TransientConfig:
    # Rank `rank` runs `factor` times slower during [start_s, start_s + duration_s) of training.
    rank: int = 0
    start_s: float = 0.0         # seconds of training before the slowdown starts
    duration_s: float = 1.0      # how long it lasts
    factor: float = 4.0          # step-time multiplier (>= 1)

    def __post_init__(self):
        _check(self.rank >= 0, "rank", "must be >= 0")
        _check(self.start_s >= 0, "start_s", "must be >= 0")
        _check(self.duration_s > 0, "duration_s", "must be > 0")
        _check(self.factor >= 1, "factor", f"must be >= 1, got {self.factor}")


@dataclass(frozen=True)
class WorkersConfig:
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when torch sees a GPU, else cpu
    slowdown: dict[int, float] = field(default_factory=dict)  # rank -> step-time multiplier (>= 1)
    delay: Optional[DelayConfig] = None                        # random per-step delays
    transient: list[TransientConfig] = field(default_factory=list)  # ranks slowed for a time window
    pin_memory: bool = True      # stage gradients through pinned host buffers on cuda
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    # off | pipeline (one more step of staleness: the next step's compute hides this one's push and
    # pull; not with bsp) | backward (each shard's gradients leave while backward still runs)
    overlap: Overlap = Overlap.OFF
    # backward: a shard's gradient leaves in pieces of at least this many KiB (none/bf16), as backward
    # produces them; smaller pieces cost more in messages than they hide
    piece_kb: int = field(default=256, metadata=int_max(1 << 20))
    # A stated device time per step, in ms (null: none): every training step takes at least this
    # long. The gradient is computed for real, then the worker waits out the rest, as a host waits on
    # its accelerator. Each step's figure is this times the step-time variability that the `sim:`
    # section states (sim.compute_jitter), drawn from (run.seed, rank, step) by the function the
    # simulator calls too (psgd.core.step_time), so a real run and its simulation take the same
    # device time at every step. Stragglers' delays are multiples of the padded time.
    device_ms: Optional[float] = None

    def __post_init__(self):
        _check(self.piece_kb >= 1, "piece_kb", f"must be >= 1, got {self.piece_kb}")
        _check(self.device_ms is None or 0 < self.device_ms < float("inf"), "device_ms",
               f"must be a finite number of ms > 0 (or null), got {self.device_ms}")
        for rank, mult in self.slowdown.items():
            _check(rank >= 0, f"slowdown[{rank}]", "rank must be >= 0")
            _check(mult >= 1.0, f"slowdown[{rank}]", f"multiplier must be >= 1, got {mult}")
