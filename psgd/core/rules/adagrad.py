"""Adagrad as torch.optim.Adagrad (no lr_decay; the sum of squares starts at 0)."""
from __future__ import annotations

import math

import torch

from psgd.config import OptimizerConfig
from psgd.core.rules.base import Rule, require, rule


@rule
class Adagrad(Rule):
    name = "adagrad"
    family = "adagrad"
    torch_class = torch.optim.Adagrad
    keys = ("lr", "eps", "weight_decay")
    decoupled_weight_decay = False

    def initial_state(self, cfg: OptimizerConfig, params: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": torch.zeros_like(params)}

    def step(self, params: torch.Tensor, grad: torch.Tensor, lr: float, update: int) -> None:
        acc = self.state["sum"]
        acc.addcmul_(grad, grad, value=1.0)
        params.addcdiv_(grad, acc.sqrt().add_(self.cfg.eps), value=-lr)

    def magnitudes(self, bound: dict[str, float], grad: float, lr: float, update: int) -> dict[str, float]:
        squared = grad * grad
        total = bound["sum"] + squared
        ratio = grad / self.cfg.eps if self.cfg.eps > 0 else math.inf  # the denominator is at least eps
        return {"": bound[""] + abs(lr) * ratio, "sum": total, "grad * grad": squared,
                "denominator": math.sqrt(total) + self.cfg.eps, "grad / denominator": ratio}

    @classmethod
    def from_torch(cls, group: dict) -> dict:
        require(group, "lr_decay", 0, "use optimizer.schedule on the servers instead")
        require(group, "initial_accumulator_value", 0, "the servers start the sum of squares at 0")
        return dict(name=cls.name, eps=float(group["eps"]), momentum=0.0, nesterov=False)
