"""Adam as torch.optim.Adam (no amsgrad), with bias correction from the update count."""
from __future__ import annotations

import math

import torch

from psgd.config import OptimizerConfig
from psgd.core.rules.base import Rule, require, rule


@rule
class Adam(Rule):
    name = "adam"
    family = "adam"
    torch_class = torch.optim.Adam
    keys = ("lr", "betas", "eps", "weight_decay")
    decoupled_weight_decay = False

    def __init__(self, cfg: OptimizerConfig, params: torch.Tensor):
        super().__init__(cfg, params)
        self._denom = torch.zeros_like(params)  # scratch, reused every step (large temporaries cost page faults)

    def initial_state(self, cfg: OptimizerConfig, params: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"exp_avg": torch.zeros_like(params), "exp_avg_sq": torch.zeros_like(params)}

    def step(self, params: torch.Tensor, grad: torch.Tensor, lr: float, update: int) -> None:
        b1, b2 = self.cfg.betas
        m, v = self.state["exp_avg"], self.state["exp_avg_sq"]
        t = update + 1
        m.mul_(b1).add_(grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = torch.sqrt(v, out=self._denom).div_(math.sqrt(1 - b2 ** t)).add_(self.cfg.eps)
        params.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))

    def magnitudes(self, bound: dict[str, float], grad: float, lr: float, update: int) -> dict[str, float]:
        b1, b2 = self.cfg.betas
        eps, t = self.cfg.eps, update + 1
        m = b1 * bound["exp_avg"] + (1 - b1) * grad
        squared = grad * grad
        v = b2 * bound["exp_avg_sq"] + (1 - b2) * squared
        # the denominator is at least eps, so each step is at most |m| / eps
        ratio = m / eps if eps > 0 else math.inf
        return {"": bound[""] + abs(lr) / (1 - b1 ** t) * ratio, "exp_avg": m, "exp_avg_sq": v,
                "grad * grad": squared, "denominator": math.sqrt(v / (1 - b2 ** t)) + eps, "exp_avg / denominator": ratio}

    @classmethod
    def from_torch(cls, group: dict) -> dict:
        require(group, "amsgrad", False, "the servers' Adam keeps no running maximum")
        # torch's Adam(decoupled_weight_decay=True) is AdamW
        name = "adamw" if cls.decoupled_weight_decay or group.get("decoupled_weight_decay", False) else "adam"
        return dict(name=name, betas=[float(b) for b in group["betas"]], eps=float(group["eps"]),
                    momentum=0.0, nesterov=False)
