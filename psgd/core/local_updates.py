"""Local updates: the outer rule the shards apply to parameter deltas, the inner
optimizer a worker steps, and how many steps a worker takes per round.

A delta (start - end of a worker's round) travels and is checked exactly as a
gradient; only the rule the shards apply to it differs (see psgd/config/local_updates.py).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable

import torch

from psgd.config import OptimizerConfig, ScheduleConfig
from psgd.core.lr_scaling import scaled_optimizer
from psgd.core.rules import rule_named

__all__ = ["server_optimizer", "outer_optimizer", "inner_torch_optimizer", "round_steps", "StepSpeeds"]


def outer_optimizer(cfg) -> OptimizerConfig:
    """The shards' rule for deltas: SGD at local.outer_lr with the outer momentum. The
    optimizer section's server-side options (staleness_aware, max_staleness_drop) carry over.

    The outer rate is for the mean of the workers' deltas, which BSP applies once a round.
    Under ssp/asp each delta is applied alone, so it takes its share, 1 / workers, of that
    step (as GEO-SGD does, Paddle's GeoCommunicator): the W deltas of a round then move the
    parameters as far as BSP's one step on their mean. Delayed Nesterov shares by itself."""
    local = cfg.local
    alone = cfg.consistency.mode.live and not local.delayed_nesterov
    return dataclasses.replace(
        cfg.optimizer, name="sgd", lr=local.outer_lr, momentum=local.outer_momentum,
        nesterov=local.outer_nesterov or local.delayed_nesterov, weight_decay=0.0, lr_scaling="none",
        schedule=ScheduleConfig(), dc_asgd=None,
        momentum_period=cfg.cluster.workers if local.delayed_nesterov else 1,
        push_share=1.0 / cfg.cluster.workers if alone else 1.0)


def server_optimizer(cfg) -> OptimizerConfig:
    """The rule a shard applies to what workers push: the outer rule under local updates,
    otherwise the optimizer section (with linear lr scaling, if configured)."""
    return outer_optimizer(cfg) if cfg.local.enabled else scaled_optimizer(cfg)


def inner_torch_optimizer(opt: OptimizerConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The worker's own optimizer for its local steps: torch.optim's class for the
    optimizer section (the same formulas the servers follow for gradients)."""
    return rule_named(opt.name).torch_optimizer(opt, params)


def round_steps(nominal: int, own_step_s: float, fastest_step_s: float) -> int:
    """DyLU (Liu et al. 2024): a worker whose steps take k times the fastest worker's
    takes nominal / k steps per round (at least one), so that every round lasts about
    as long as the fastest worker's. Without both times it keeps the nominal count."""
    if not (0 < own_step_s < math.inf and 0 < fastest_step_s < math.inf):
        return nominal
    ratio = fastest_step_s / own_step_s
    return max(1, min(nominal, int(nominal * ratio + 0.5)))


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
