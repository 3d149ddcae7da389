"""Local updates: the outer rule the shards apply to parameter deltas, the inner
optimizer a worker steps, and how many steps a worker takes per round.

A delta (start - end of a worker's round) travels and is checked exactly as a
gradient; only the rule the shards apply to it differs (see psgd/config/local_updates.py).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import torch

from psgd.config import OptimizerConfig, ScheduleConfig
from psgd.core.lr_scaling import scaled_optimizer

__all__ = ["server_optimizer", "outer_optimizer", "inner_torch_optimizer"]


def outer_optimizer(cfg) -> OptimizerConfig:
    """The shards' rule for deltas: SGD at local.outer_lr with the outer momentum. The
    optimizer section's server-side options (staleness_aware, max_staleness_drop) carry over."""
    local = cfg.local
    return dataclasses.replace(
        cfg.optimizer, name="sgd", lr=local.outer_lr, momentum=local.outer_momentum,
        nesterov=local.outer_nesterov or local.delayed_nesterov, weight_decay=0.0, lr_scaling="none",
        schedule=ScheduleConfig(), dc_asgd=None,
        momentum_period=cfg.cluster.workers if local.delayed_nesterov else 1)


def server_optimizer(cfg) -> OptimizerConfig:
    """The rule a shard applies to what workers push: the outer rule under local updates,
    otherwise the optimizer section (with linear lr scaling, if configured)."""
    return outer_optimizer(cfg) if cfg.local.enabled else scaled_optimizer(cfg)


def inner_torch_optimizer(opt: OptimizerConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The worker's own optimizer for its local steps: torch.optim's class for the
    optimizer section (the same formulas the servers follow for gradients)."""
    params = list(params)
    if opt.name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=opt.lr, momentum=opt.effective_momentum, nesterov=opt.nesterov,
                               weight_decay=opt.weight_decay)
    if opt.name == "adam":
        return torch.optim.Adam(params, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps,
                                weight_decay=opt.weight_decay)
    if opt.name == "adamw":
        return torch.optim.AdamW(params, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps,
                                 weight_decay=opt.weight_decay)
    return torch.optim.Adagrad(params, lr=opt.lr, eps=opt.eps, weight_decay=opt.weight_decay)
