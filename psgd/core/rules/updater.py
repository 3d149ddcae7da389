"""Server-side update rules on one shard's flat parameter tensor.

Every rule (psgd.core.rules, one module per optimizer) is a handful of
vectorised in-place ops on flat tensors (never a loop over parameters) and
follows torch.optim's formulas exactly, so a shard and torch.optim given the
same gradients produce the same parameters. Staleness-aware scaling, DC-ASGD
compensation, weight decay and learning-rate schedules wrap the rule, here. No sockets here: this is pure policy, unit-testable alone.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy
import torch

from psgd.config import OptimizerConfig, ScheduleConfig
from psgd.core.rules import Rule, rule_named

__all__ = ["FLOAT32_MAX", "ShardUpdater", "abs_bound", "abs_max", "all_finite", "scheduled_lr"]

# A step runs unguarded when every value it can produce is bounded below this: float32's
# largest value over 4, which also covers the rounding of the few ops behind each bound.
FLOAT32_MAX = torch.finfo(torch.float32).max
UNGUARDED_LIMIT = FLOAT32_MAX / 4
# Each bound is widened by this factor: a float32 op rounds by at most 2**-24 of its result, a
# step has a handful of them. (The widening compounds over steps; when it nears the limit the
# bounds are measured again, exactly.)
ROUNDING = 1 + 2 ** -16


def all_finite(t: torch.Tensor) -> bool:
    """True if no element is NaN or +-Inf. One vectorised sum, no temporaries:
    any NaN/Inf makes the sum non-finite; only then (or if huge finite values
    overflow it) is the exact elementwise check run."""
    return math.isfinite(t.sum().item()) or bool(torch.isfinite(t).all())


def abs_max(t: torch.Tensor) -> float:
    """The largest |element| (inf when an element is NaN or infinite): one pass."""
    if t.numel() == 0:
        return 0.0
    lo, hi = torch.aminmax(t)
    lo, hi = lo.item(), hi.item()
    return max(-lo, hi) if math.isfinite(lo) and math.isfinite(hi) else math.inf


# abs_bound's widening: its sum of squares rounds each nonnegative term and partial sum to nearest,
# which never takes the sum below the largest square less 2**-23 of it; the absolute term covers
# squares flushed to zero (|x| < 1e-19 under flush-to-zero).
_SQUARES_ROUNDING = 1 + 2 ** -20
_FLUSHED = 1e-18
# From this many elements (1 MB) numpy's dot (OpenBLAS) beats the exact min/max pass (~0.24 vs ~0.5 ms at
# 10 MB, one thread); below it numpy's call and error-state overhead (~4 us) outweighs the pass.
_DOT_FROM = 1 << 18


def abs_bound(t: torch.Tensor) -> float:
    """An upper bound on the largest |element| (inf when an element is NaN or infinite), from
    one sum of squares: sqrt(x . x) >= max |x|. For a large contiguous float32 CPU tensor that
    is one BLAS dot, as cheap as the plain sum a finiteness check reads, where an exact max/min
    pass costs about twice that; for a small one, when the squares overflow, or for other
    tensors, the exact `abs_max`. The bound exceeds the maximum by up to sqrt(numel): that only matters within a
    factor sqrt(numel) of float32's range, where the guard then measures exactly."""
    if t.numel() < _DOT_FROM or t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
        return abs_max(t)
    flat = t.detach().numpy().reshape(-1)
    with numpy.errstate(over="ignore", invalid="ignore"):  # an overflow or a NaN is the answer, not a warning
        squares = float(numpy.dot(flat, flat))
    if not math.isfinite(squares):
        return abs_max(t)  # an element NaN or infinite, or finite values whose squares overflow
    return math.sqrt(squares) * _SQUARES_ROUNDING + _FLUSHED


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


class ShardUpdater:
    """Applies gradients to a flat parameter tensor in place: the configured
    optimizer's rule (psgd.core.rules) inside the learning-rate schedule,
    staleness-aware scaling, DC-ASGD and weight decay. Not thread-safe."""

    def __init__(self, cfg: OptimizerConfig, params: torch.Tensor):
        self.cfg = cfg
        self.updates = 0  # updates applied; drives schedules and Adam's bias correction
        self.base: Rule = rule_named(cfg.name)(cfg, params)
        self.state = self.base.state  # the rule's flat tensors, checkpointed by name
        self._kept: Optional[dict[str, torch.Tensor]] = None  # apply_if_finite's copies, to put back a refused update
        # Upper bounds on |params| ("") and |each state entry|, true while the tensors carry the
        # identities and in-place versions in _bounded (anything that writes them moves those).
        self._bounds: dict[str, float] = {}
        self._bounded: tuple = ()

    def lr(self, staleness: int = 0) -> float:
        lr = scheduled_lr(self.cfg.lr, self.cfg.schedule, self.updates) * self.cfg.push_share
        if self.cfg.staleness_aware:
            lr /= max(1, staleness)
        return lr

    def apply_if_finite(self, params: torch.Tensor, grad: torch.Tensor, staleness: int = 0,
                        read_params: Optional[torch.Tensor] = None, grad_max: Optional[float] = None) -> bool:
        """`apply`, whole or not at all: returns False, with `params` and the state as they
        were, when the update would make a parameter or a state entry non-finite. Finite
        inputs can overflow float32 (four deltas of 1e38 under momentum). Running bounds on
        |params| and the state, and `grad_max` (any bound on |grad|: `abs_bound(grad)` when not
        given), show almost always that no value can overflow: then the step just runs. When
        they cannot, every bound is measured exactly and tried again; only when that cannot rule
        it out either are `params` and the state copied, the step run and its result checked."""
        if grad_max is None:
            grad_max = self.grad_bound(params, grad, staleness, read_params)
        if not math.isfinite(grad_max):
            return False
        lr = self.lr(staleness)
        after = self._bounds_after(params, grad_max, lr, read_params)
        if after is None:
            after = self._bounds_after(params, abs_max(grad), lr, read_params, measure=True)
        if after is not None:
            self._step(params, grad, lr, read_params)
            self._bounds, self._bounded = after, self._identity(params)
            return True
        self._bounds, self._bounded = {}, ()
        kept = self._keep(params)
        self._step(params, grad, lr, read_params)
        if all(all_finite(t) for t in (params, *self.state.values())):
            return True
        for name, saved in kept.items():
            (params if name == "" else self.state[name]).copy_(saved)
        self.updates -= 1
        return False

    def grad_bound(self, params: torch.Tensor, grad: torch.Tensor, staleness: int = 0,
                   read_params: Optional[torch.Tensor] = None) -> float:
        """A bound on |grad| that settles this step's guard, from one pass: inf when an element
        is NaN or infinite. When no finite gradient at all could take the step out of range
        (plain SGD at a rate below about 1/4, the common case), the pass is the finiteness
        check's sum and the bound float32's largest value; otherwise `abs_bound`."""
        if self._bounds_after(params, FLOAT32_MAX, self.lr(staleness), read_params) is not None:
            return FLOAT32_MAX if all_finite(grad) else math.inf
        return abs_bound(grad)

    def _identity(self, params: torch.Tensor) -> tuple:
        if not self.state:  # plain SGD: no state to follow (the common case, checked twice per update)
            return params.data_ptr(), params._version
        return tuple((t.data_ptr(), t._version) for t in (params, *self.state.values()))

    def _bounds_after(self, params: torch.Tensor, grad_max: float, lr: float,
                      read_params: Optional[torch.Tensor], measure: bool = False) -> Optional[dict[str, float]]:
        """Bounds on |params| and the state after the step, or None when some value the step
        computes could reach UNGUARDED_LIMIT. The bounds in force are measured (one pass over
        each tensor) when asked, or when something other than this rule wrote the tensors."""
        if measure or self._bounded != self._identity(params):
            self._bounds = {name: abs_max(t) for name, t in (("", params), *self.state.items())}
            self._bounded = self._identity(params)
        cfg, bound = self.cfg, self._bounds
        lr, grad = abs(lr), grad_max
        # The largest value the step computes on its way: the gradient itself is given (finite), the
        # compensated or decayed gradient is computed. (NaN stays NaN, and fails the test below.)
        largest = 0.0
        if cfg.dc_asgd is not None and read_params is not None and cfg.dc_asgd.lambda_ > 0:
            largest = grad * grad
            if not largest < UNGUARDED_LIMIT:  # before the pass over read_params (also for a NaN)
                return None
            grad += cfg.dc_asgd.lambda_ * grad * grad * (bound[""] + abs_max(read_params))
            largest = max(largest, grad)
        if cfg.weight_decay and self.base.decoupled_weight_decay:
            bound = {**bound, "": bound[""] * abs(1 - lr * cfg.weight_decay)}
        elif cfg.weight_decay:
            grad += abs(cfg.weight_decay) * bound[""]
            largest = max(largest, grad)
        after = self.base.magnitudes(bound, grad, lr, self.updates)
        if not (largest < UNGUARDED_LIMIT and all(v < UNGUARDED_LIMIT for v in after.values())):  # False for a NaN
            return None
        return {name: after[name] * ROUNDING for name in ("", *self.state)}

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
        self._step(params, grad, self.lr(staleness), read_params)

    def _step(self, params: torch.Tensor, grad: torch.Tensor, lr: float, read_params: Optional[torch.Tensor]) -> None:
        cfg = self.cfg
        if cfg.dc_asgd is not None and read_params is not None and cfg.dc_asgd.lambda_ > 0:
            # g + lambda * g * g * (w_now - w_read), Zheng et al. 2017
            diff = params - read_params
            grad = grad + cfg.dc_asgd.lambda_ * grad * grad * diff
        if cfg.weight_decay and self.base.decoupled_weight_decay:
            params.mul_(1 - lr * cfg.weight_decay)  # decoupled (Loshchilov & Hutter), as torch.optim.AdamW
        elif cfg.weight_decay:
            grad = grad.add(params, alpha=cfg.weight_decay)
        self.base.step(params, grad, lr, self.updates)
        self.updates += 1

    @property
    def sparse_exact(self) -> bool:
        """True if a sparse gradient changes only its own coordinates (plain SGD,
        no momentum, weight decay or delay compensation); other rules see it dense."""
        return self.base.sparse_exact() and not self.cfg.weight_decay and self.cfg.dc_asgd is None

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

    def state_dict(self) -> dict:
        return {"updates": self.updates, **{k: v.clone() for k, v in self.state.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.updates = int(sd["updates"])
        for k in self.state:
            self.state[k].copy_(sd[k])
