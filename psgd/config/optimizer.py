"""The `optimizer:` section: the shards' update rule (or, under local updates, the
workers' inner optimizer), its learning-rate schedule and its staleness remedies."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from psgd.config.loader import check as _check

__all__ = ["DcAsgdConfig", "OptimizerConfig", "ScheduleConfig"]


@dataclass(frozen=True)
class DcAsgdConfig:
    # Delay compensation (Zheng et al. 2017): g + lambda * g * g * (w_now - w_read).
    # YAML key is `lambda`.
    lambda_: float = 0.04

    def __post_init__(self):
        _check(self.lambda_ >= 0, "lambda", "must be >= 0")


@dataclass(frozen=True)
class ScheduleConfig:
    name: Literal["constant", "step", "cosine"] = "constant"  # lr schedule over the servers' update count
    warmup_updates: int = 0      # linear ramp from 0 over this many server updates
    step_size: int = 1000        # step: multiply by gamma every step_size updates
    gamma: float = 0.1           # step: the factor
    total_updates: int = 10000   # cosine: updates until lr reaches min_lr
    min_lr: float = 0.0          # cosine: the last lr

    def __post_init__(self):
        _check(self.warmup_updates >= 0, "warmup_updates", "must be >= 0")
        _check(self.step_size >= 1, "step_size", "must be >= 1")
        _check(0 < self.gamma <= 1, "gamma", "must be in (0, 1]")
        _check(self.total_updates >= 1, "total_updates", "must be >= 1")
        _check(self.min_lr >= 0, "min_lr", "must be >= 0")


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["sgd", "momentum", "adam", "adamw", "adagrad"] = "sgd"  # adamw: decoupled weight decay
    lr: float = 0.05             # learning rate (under local updates: the workers' inner optimizer's)
    # linear: bsp/allreduce use lr x (workers - backup_workers), the number of
    # gradients one of their updates averages; ssp/asp keep lr (psgd.core.lr_scaling)
    lr_scaling: Literal["none", "linear"] = "none"
    momentum: float = 0.0        # sgd uses momentum when > 0; `momentum` defaults it to 0.9
    nesterov: bool = False       # Nesterov momentum (needs momentum > 0)
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # adam
    eps: float = 1e-8            # adam and adagrad denominator term
    weight_decay: float = 0.0    # L2 added to the gradient, as torch.optim does
    staleness_aware: bool = False  # divide the step by max(1, staleness) (Zhang et al. 2016)
    dc_asgd: Optional[DcAsgdConfig] = None  # delay compensation, e.g. {lambda: 0.04}; null: off
    max_staleness_drop: Optional[int] = None  # drop gradients with staleness > k
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    # The momentum moves once per this many updates (Delayed Nesterov): set from `local`, not by users.
    momentum_period: int = field(default=1, metadata={"internal": True})
    # Each update is applied at this fraction of lr: set from `local` (one worker's share of an
    # outer step, 1 / workers, for a delta applied alone under ssp/asp), not by users.
    push_share: float = field(default=1.0, metadata={"internal": True})

    def __post_init__(self):
        _check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        _check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        _check(not self.nesterov or self.momentum > 0 or self.name == "momentum",
               "nesterov", "needs momentum > 0")
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "betas",
               "must be two numbers in [0, 1)")
        _check(self.eps > 0, "eps", "must be > 0")
        _check(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        _check(self.max_staleness_drop is None or self.max_staleness_drop >= 0,
               "max_staleness_drop", "must be >= 0")

    @property
    def effective_momentum(self) -> float:
        if self.name == "momentum" and self.momentum == 0.0:
            return 0.9
        return self.momentum
