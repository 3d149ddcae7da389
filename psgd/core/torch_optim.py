"""Reads a user's torch.optim optimizer as a psgd server update rule.

psgd's servers own the optimizer state, so a user's `torch.optim.SGD`, `Adam`,
`AdamW` or `Adagrad` is never stepped: its hyperparameters are translated into
an `OptimizerConfig` that follows the same formulas (see update_rules.py).
Anything the servers cannot reproduce exactly (amsgrad, maximize, dampening,
Adagrad's lr_decay, parameter groups with different settings, parameters the
model does not own) is an error that names the setting, never a silent change.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

import torch

from psgd.config import OptimizerConfig
from psgd.core.rules import RULES, Rule, UnsupportedOptimizer, rule_named
from psgd.core.rules.base import require

__all__ = ["rule_from_torch", "rule_differences", "UnsupportedOptimizer"]

# Settings that only change how torch computes a step, not which step it computes.
_IMPLEMENTATION_ONLY = {"foreach", "fused", "capturable", "differentiable"}


def _rule_for(optimizer: torch.optim.Optimizer) -> Optional[type[Rule]]:
    """The rule following `optimizer`'s class: the most specific torch class it is an instance of."""
    matches = [r for r in RULES.values() if r.torch_class is not None and isinstance(optimizer, r.torch_class)]
    return min(matches, key=lambda r: -len(r.torch_class.__mro__), default=None)


def _single_group(optimizer: torch.optim.Optimizer) -> dict:
    """The one set of hyperparameters every parameter group shares."""
    groups = optimizer.param_groups
    first = {k: v for k, v in groups[0].items() if k != "params" and k not in _IMPLEMENTATION_ONLY}
    for i, g in enumerate(groups[1:], start=1):
        for key, value in first.items():
            other = g.get(key)
            if _plain(other) != _plain(value):
                raise UnsupportedOptimizer(
                    f"parameter group {i} has {key}={_plain(other)!r} but group 0 has {_plain(value)!r}: "
                    "the servers apply one rule to every parameter, so all groups must share their settings")
    return {k: _plain(v) for k, v in first.items()}


def _plain(value):
    """Tensor hyperparameters (torch allows a tensor lr) as Python numbers, tuples as lists."""
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _check_params(optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter]) -> None:
    owned = {id(p) for p in params if p.requires_grad}
    given = {id(p) for g in optimizer.param_groups for p in g["params"]}
    if given - owned:
        raise UnsupportedOptimizer(f"the optimizer holds {len(given - owned)} parameter(s) that are not "
                                   "trainable parameters of the model")
    if owned - given:
        raise UnsupportedOptimizer(f"{len(owned - given)} trainable parameter(s) of the model are not in the "
                                   "optimizer: psgd's servers update every trainable parameter")


def rule_from_torch(optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter],
                    base: OptimizerConfig) -> OptimizerConfig:
    """`base` with the rule and hyperparameters of `optimizer`. psgd-only settings
    of `base` (schedule, staleness_aware, dc_asgd, max_staleness_drop) are kept."""
    kind = type(optimizer).__name__
    follows = _rule_for(optimizer)
    if follows is None:
        mapped = ", ".join(sorted(r.torch_class.__name__ for r in RULES.values() if r.torch_class is not None))
        raise UnsupportedOptimizer(f"psgd maps torch.optim {mapped}; got {kind}")
    _check_params(optimizer, params)
    try:
        g = _single_group(optimizer)
        require(g, "maximize", False, "the servers always minimise")
        rule = dict(lr=float(g["lr"]), weight_decay=float(g.get("weight_decay", 0.0)), **follows.from_torch(g))
    except UnsupportedOptimizer as exc:
        raise UnsupportedOptimizer(f"torch.optim.{kind}: {exc}") from None
    try:
        return dataclasses.replace(base, **rule)
    except ValueError as exc:  # ConfigError: e.g. lr <= 0
        raise UnsupportedOptimizer(f"torch.optim.{kind}: {exc}") from None


def _canonical(cfg: OptimizerConfig) -> tuple[str, dict]:
    """The rule's family and the settings that decide its arithmetic (the rule's `keys`)."""
    rule = rule_named(cfg.name)
    return rule.family, rule.settings(cfg)


def rule_differences(wanted: OptimizerConfig, configured: OptimizerConfig) -> list[str]:
    """Human-readable differences between two rules' arithmetic ([] when they agree)."""
    (n1, v1), (n2, v2) = _canonical(wanted), _canonical(configured)
    if n1 != n2:
        return [f"optimizer.name: {n1} here, {n2} in the config"]
    return [f"optimizer.{k}: {v1[k]!r} here, {v2[k]!r} in the config"
            for k in v1 if not _close(v1[k], v2[k])]


def _close(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(a)), abs(float(b)))
    return a == b
