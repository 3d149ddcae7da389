"""Many virtual workers' gradients in one call: `torch.func.vmap` of `grad`
over the stacked parameter versions and the stacked batches.

Contract. The batched gradients are mathematically those of the one-by-one
path (Executor._step): the same loss, at the same parameters, on the same
batches. They are not bit-identical: batched kernels sum in another order,
so results may differ in the last bits (tests/unit/sim/test_batched.py holds
them to 1e-5 of each tensor's largest gradient). So the batched path is for
`--on sim` studies (`sim.batched`, on by default), never for `psgd replay`,
which runs the exact path to stay bit-identical with the recorded run.

Models vmap cannot run correctly (BatchNorm in training mode, dropout or any
other randomness, in-place updates of module state) are detected, by
inspection and by a first call checked against the exact path, and run one
by one instead, with the reason kept (`fallback`), never silently wrong.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from psgd.sim.binding import ModelBinding

__all__ = ["BatchedGradients", "RTOL", "initialize_functorch", "max_relative_error", "static_fallback"]

RTOL = 1e-5  # batched against exact: per tensor, relative to its largest exact gradient


def initialize_functorch() -> float:
    """torch.func's one-time setup in this process (about a second of CPU on
    the first vmap, whatever the model): done ahead so that a cost measurement
    counts it once, apart. Returns the CPU seconds it took."""
    t0 = time.process_time()
    vmap(grad(lambda w, x: (w * x).sum()))(torch.ones(2, 2), torch.ones(2, 2))
    return time.process_time() - t0


def static_fallback(model: nn.Module) -> Optional[str]:
    """Why `model` cannot be batched, as seen from its modules; None if nothing is seen."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training:
            return f"{name or 'model'}: {type(m).__name__} in training mode (batch statistics, running stats updated in place)"
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0:
            return f"{name or 'model'}: {type(m).__name__} draws random numbers"
    return None


def max_relative_error(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """The largest |got - want| of each tensor over that tensor's largest |want|, over the tensors."""
    err = 0.0
    for g, w in zip(got, want):
        scale = w.abs().max().item()
        diff = (g - w).abs().max().item()
        err = max(err, diff / scale if scale > 0 else diff)
    return err


class BatchedGradients:
    """Gradients of `loss(model(inputs(x)), targets(y))` for K parameter
    versions (flat per-shard tensors, as the workers hold them) at once."""

    def __init__(self, model: nn.Module, binding: ModelBinding, task):
        self.model, self.binding, self.task = model, binding, task
        self.names = [n for n, _ in model.named_parameters()]
        self._grad = vmap(grad(self._loss, has_aux=True), in_dims=(0, 0, 0), randomness="error")

    def _loss(self, params: dict, x: torch.Tensor, y: torch.Tensor):
        loss = self.task.loss(functional_call(self.model, params, (self.task.inputs(x),)), self.task.targets(y))
        return loss, loss.detach()

    def compute(self, versions: Sequence[Sequence[torch.Tensor]], xs: Sequence[torch.Tensor],
                ys: Sequence[torch.Tensor], out: Sequence[Sequence[torch.Tensor]]) -> list[float]:
        """Worker k's gradient at `versions[k]` on (xs[k], ys[k]) into its zeroed
        flat per-shard buffers `out[k]`; returns the K losses."""
        per_worker = [self.binding.tensors(v) for v in versions]
        stacked = {n: torch.stack([p[i] for p in per_worker]) for i, n in enumerate(self.names)}
        grads, losses = self._grad(stacked, torch.stack(list(xs)), torch.stack(list(ys)))
        for k, flat in enumerate(out):
            self.binding.scatter_grads([grads[n][k] for n in self.names], flat)
        return losses.tolist()
