"""Server-side update rules on one shard's flat parameter tensor.

Every rule is a handful of vectorised in-place ops on flat tensors (never a
loop over parameters) and follows torch.optim's formulas exactly, so a shard
and torch.optim given the same gradients produce the same parameters.
Staleness-aware scaling, DC-ASGD compensation and learning-rate schedules
wrap the base rule. No sockets here: this is pure policy, unit-testable alone.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from psgd.config import OptimizerConfig, ScheduleConfig

__all__ = ["UpdateRule", "all_finite", "scheduled_lr"]


def all_finite(t: torch.Tensor) -> bool:
    """True if no element is NaN or +-Inf. One vectorised sum, no temporaries:
    any NaN/Inf makes the sum non-finite; only then (or if huge finite values
    overflow it) is the exact elementwise check run."""
    return math.isfinite(t.sum().item()) or bool(torch.isfinite(t).all())


def scheduled_lr(base_lr: float, sched: ScheduleConfig, update: int) -> float:
    """Learning rate for the server's `update`-th update (0-based)."""
    if sched.warmup_updates and update < sched.warmup_updates:
        return base_lr * (update + 1) / sched.warmup_updates
    k = update - sched.warmup_updates
    if sched.name == "step":
        return base_lr * sched.gamma ** (k // sched.step_size)
    if sched.name == "cosine":
        frac = min(1.0, k / sched.total_updates)
        return sched.min_lr + (base_lr - sched.min_lr) * 0.5 * (1 + math.cos(math.pi * frac))
    return base_lr


class UpdateRule:
    """Applies gradients to a flat parameter tensor in place. Not thread-safe."""

    def __init__(self, cfg: OptimizerConfig, params: torch.Tensor):
        self.cfg = cfg
        self.updates = 0  # updates applied; drives schedules and Adam's bias correction
        self.momentum = cfg.effective_momentum
        zeros = lambda: torch.zeros_like(params)  # noqa: E731
        self.state: dict[str, torch.Tensor] = {}
        self._kept: Optional[dict[str, torch.Tensor]] = None  # apply's copies, to put back a refused update
        if cfg.name in ("sgd", "momentum") and self.momentum > 0:
            self.state["momentum_buffer"] = zeros()
            if cfg.momentum_period > 1:
                self.state["period_sum"] = zeros()  # Delayed Nesterov: the gradients since the last move
        elif cfg.name in ("adam", "adamw"):
            self.state["exp_avg"] = zeros()
            self.state["exp_avg_sq"] = zeros()
            self._denom = zeros()  # scratch, reused every step (large temporaries cost page faults)
        elif cfg.name == "adagrad":
            self.state["sum"] = zeros()

    def lr(self, staleness: int = 0) -> float:
        lr = scheduled_lr(self.cfg.lr, self.cfg.schedule, self.updates) * self.cfg.push_share
        if self.cfg.staleness_aware:
            lr /= max(1, staleness)
        return lr

    def apply_if_finite(self, params: torch.Tensor, grad: torch.Tensor, staleness: int = 0,
                        read_params: Optional[torch.Tensor] = None) -> bool:
        """`apply`, whole or not at all: returns False, with `params` and the state as they
        were, when the update would make a parameter or a state entry non-finite. Finite
        inputs can overflow float32 (four deltas of 1e38 under momentum), so the result is
        what is checked. Costs a copy of `params` and the state into reused buffers."""
        kept = self._keep(params)
        self.apply(params, grad, staleness, read_params)
        if all(all_finite(t) for t in (params, *self.state.values())):
            return True
        for name, saved in kept.items():
            (params if name == "" else self.state[name]).copy_(saved)
        self.updates -= 1
        return False

    def _keep(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copies of the parameters ("") and the state, in buffers reused from push to push."""
        if self._kept is None:
            self._kept = {name: torch.empty_like(t) for name, t in (("", params), *self.state.items())}
        for name, saved in self._kept.items():
            saved.copy_(params if name == "" else self.state[name])
        return self._kept

    def apply(self, params: torch.Tensor, grad: torch.Tensor, staleness: int = 0,
              read_params: Optional[torch.Tensor] = None) -> None:
        """One update. `grad` is not modified. `read_params` (the parameters the
        gradient was computed on) enables DC-ASGD compensation when configured."""
        cfg = self.cfg
        lr = self.lr(staleness)
        if cfg.dc_asgd is not None and read_params is not None and cfg.dc_asgd.lambda_ > 0:
            # g + lambda * g * g * (w_now - w_read), Zheng et al. 2017
            diff = params - read_params
            grad = grad + cfg.dc_asgd.lambda_ * grad * grad * diff
        if cfg.weight_decay and cfg.name == "adamw":
            params.mul_(1 - lr * cfg.weight_decay)  # decoupled (Loshchilov & Hutter), as torch.optim.AdamW
        elif cfg.weight_decay:
            grad = grad.add(params, alpha=cfg.weight_decay)
        if cfg.name in ("sgd", "momentum"):
            self._sgd(params, grad, lr)
        elif cfg.name in ("adam", "adamw"):
            self._adam(params, grad, lr)
        else:
            self._adagrad(params, grad, lr)
        self.updates += 1

    @property
    def sparse_exact(self) -> bool:
        """True if a sparse gradient changes only its own coordinates (plain SGD,
        no momentum, weight decay or delay compensation); other rules see it dense."""
        return (self.cfg.name in ("sgd", "momentum") and self.momentum == 0 and not self.cfg.weight_decay
                and self.cfg.dc_asgd is None)

    def apply_sparse(self, params: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                     staleness: int = 0) -> bool:
        """One plain-SGD update from (indices, values): one vectorised index_add_,
        touching only those coordinates. Requires `sparse_exact`. Returns False, with
        `params` as they were, when a touched coordinate would become non-finite."""
        if not self.sparse_exact:
            raise ValueError(f"{self.cfg.name} with these options needs dense gradients")
        before = params[indices]
        params.index_add_(0, indices, values, alpha=-self.lr(staleness))
        if not all_finite(params[indices]):
            params.index_copy_(0, indices, before)  # a repeated index puts back the same value
            return False
        self.updates += 1
        return True

    def _sgd(self, params, grad, lr):
        if self.momentum == 0:
            params.add_(grad, alpha=-lr)
            return
        if self.cfg.momentum_period > 1:
            self._delayed_nesterov(params, grad, lr)
            return
        buf = self.state["momentum_buffer"]
        buf.mul_(self.momentum).add_(grad)
        if self.cfg.nesterov:
            params.add_(grad, alpha=-lr).add_(buf, alpha=-lr * self.momentum)
        else:
            params.add_(buf, alpha=-lr)

    def _delayed_nesterov(self, params, grad, lr):
        """Liu et al. 2024, with c = 0: each gradient is applied at lr / N; every N-th
        update also moves the momentum by the mean of the last N gradients and steps
        along it, so N in-order updates equal one Nesterov step on their mean."""
        n, beta = self.cfg.momentum_period, self.momentum
        acc, buf = self.state["period_sum"], self.state["momentum_buffer"]
        acc.add_(grad)
        if (self.updates + 1) % n == 0:
            buf.mul_(beta).add_(acc, alpha=1.0 / n)
            params.add_(buf, alpha=-lr * beta)
            acc.zero_()
        params.add_(grad, alpha=-lr / n)

    def _adam(self, params, grad, lr):
        b1, b2 = self.cfg.betas
        m, v = self.state["exp_avg"], self.state["exp_avg_sq"]
        t = self.updates + 1
        m.mul_(b1).add_(grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = torch.sqrt(v, out=self._denom).div_(math.sqrt(1 - b2 ** t)).add_(self.cfg.eps)
        params.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))

    def _adagrad(self, params, grad, lr):
        acc = self.state["sum"]
        acc.addcmul_(grad, grad, value=1.0)
        params.addcdiv_(grad, acc.sqrt().add_(self.cfg.eps), value=-lr)

    def state_dict(self) -> dict:
        return {"updates": self.updates, **{k: v.clone() for k, v in self.state.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.updates = int(sd["updates"])
        for k in self.state:
            self.state[k].copy_(sd[k])
