"""The optimizers of a run with local updates: the outer rule the shards apply to the
workers' deltas (as the selected method says), the rule a shard applies in any run, and
the inner optimizer a worker steps. A delta (start - end of a worker's round) travels and
is checked exactly as a gradient; only the rule the shards apply to it differs
(psgd/config/local_updates.py)."""
from __future__ import annotations

from typing import Iterable

import torch

from psgd.config import OptimizerConfig
from psgd.core.local_methods.registry import method_for
from psgd.core.lr_scaling import scaled_optimizer
from psgd.core.rules import rule_named

__all__ = ["server_optimizer", "outer_optimizer", "inner_torch_optimizer"]


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
