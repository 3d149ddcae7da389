"""SGD, with momentum and Nesterov as torch.optim.SGD (no dampening), and Delayed
Nesterov for asynchronous outer steps (Liu et al. 2024)."""
from __future__ import annotations

import torch

from psgd.config import OptimizerConfig
from psgd.core.rules.base import Rule, require, rule


@rule
class SGD(Rule):
    name = "sgd"
    family = "sgd"
    torch_class = torch.optim.SGD
    keys = ("lr", "momentum", "nesterov", "weight_decay")
    decoupled_weight_decay = False

    def __init__(self, cfg: OptimizerConfig, params: torch.Tensor):
        self.momentum = cfg.effective_momentum
        super().__init__(cfg, params)

    def initial_state(self, cfg: OptimizerConfig, params: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.momentum == 0:
            return {}
        state = {"momentum_buffer": torch.zeros_like(params)}
        if cfg.momentum_period > 1:
            state["period_sum"] = torch.zeros_like(params)  # Delayed Nesterov: the gradients since the last move
        return state

    def step(self, params: torch.Tensor, grad: torch.Tensor, lr: float, update: int) -> None:
        if self.momentum == 0:
            params.add_(grad, alpha=-lr)
            return
        if self.cfg.momentum_period > 1:
            self._delayed_nesterov(params, grad, lr, update)
            return
        buf = self.state["momentum_buffer"]
        buf.mul_(self.momentum).add_(grad)
        if self.cfg.nesterov:
            params.add_(grad, alpha=-lr).add_(buf, alpha=-lr * self.momentum)
        else:
            params.add_(buf, alpha=-lr)

    def _delayed_nesterov(self, params, grad, lr, update):
        """Liu et al. 2024, with c = 0: each gradient is applied at lr / N; every N-th
        update also moves the momentum by the mean of the last N gradients and steps
        along it, so N in-order updates equal one Nesterov step on their mean."""
        n, beta = self.cfg.momentum_period, self.momentum
        acc, buf = self.state["period_sum"], self.state["momentum_buffer"]
        acc.add_(grad)
        if (update + 1) % n == 0:
            buf.mul_(beta).add_(acc, alpha=1.0 / n)
            params.add_(buf, alpha=-lr * beta)
            acc.zero_()
        params.add_(grad, alpha=-lr / n)

    def magnitudes(self, bound: dict[str, float], grad: float, lr: float, update: int) -> dict[str, float]:
        lr, beta = abs(lr), abs(self.momentum)
        if beta == 0:
            return {"": bound[""] + lr * grad}
        if self.cfg.momentum_period > 1:
            n = self.cfg.momentum_period
            summed = bound["period_sum"] + grad
            moves = (update + 1) % n == 0
            buf = beta * bound["momentum_buffer"] + summed / n if moves else bound["momentum_buffer"]
            params = bound[""] + (lr * beta * buf if moves else 0.0) + lr / n * grad
            return {"": params, "momentum_buffer": buf, "period_sum": 0.0 if moves else summed,
                    "the period's sum": summed}
        buf = beta * bound["momentum_buffer"] + grad
        step = lr * grad + lr * beta * buf if self.cfg.nesterov else lr * buf
        return {"": bound[""] + step, "momentum_buffer": buf}

    def sparse_exact(self) -> bool:
        return self.momentum == 0

    @classmethod
    def from_torch(cls, group: dict) -> dict:
        require(group, "dampening", 0, "the servers' momentum has no dampening")
        return dict(name=cls.name, momentum=float(group["momentum"]), nesterov=bool(group["nesterov"]))
