"""Local updates: the outer rule the shards apply to parameter deltas, the inner
optimizer a worker steps, and how many steps a worker takes per round.

A delta (start - end of a worker's round) travels and is checked exactly as a
gradient; only the rule the shards apply to it differs (see psgd/config/local_updates.py).
What differs between methods (outer rule, round length) is each method's class,
in psgd.core.local_methods.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

from psgd.config import OptimizerConfig
from psgd.core.local_methods import method_for
from psgd.core.lr_scaling import scaled_optimizer
from psgd.core.rules import rule_named

__all__ = ["server_optimizer", "outer_optimizer", "inner_torch_optimizer", "StepSpeeds"]


def outer_optimizer(cfg) -> OptimizerConfig:
    """The shards' rule for deltas, as the selected local method says
    (psgd.core.local_methods: outer SGD at local.outer_lr with the outer momentum)."""
    return method_for(cfg).outer_rule(cfg.optimizer, cfg.consistency.mode.live)


def server_optimizer(cfg) -> OptimizerConfig:
    """The rule a shard applies to what workers push: the outer rule under local updates,
    otherwise the optimizer section (with linear lr scaling, if configured)."""
    return outer_optimizer(cfg) if cfg.local.enabled else scaled_optimizer(cfg)


def inner_torch_optimizer(opt: OptimizerConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The worker's own optimizer for its local steps: torch.optim's class for the
    optimizer section (the same formulas the servers follow for gradients)."""
    return rule_named(opt.name).torch_optimizer(opt, params)


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
