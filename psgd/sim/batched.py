"""Many virtual workers' gradients in one call: `torch.func.vmap` of `grad`
over the stacked parameter versions and the stacked batches.

Contract. The batched gradients are mathematically those of the one-by-one
path (Executor._step): the same loss, at the same parameters, on the same
batches. They are not bit-identical: batched kernels sum in another order,
so results may differ in the last bits (tests/unit/sim/test_batched.py holds
them to 1e-5 of each tensor's largest gradient). So the batched path is for
`--on sim` studies (`sim.batched`, on by default), never for `psgd replay`,
which runs the exact path to stay bit-identical with the recorded run.

On a device (`sim.gradient_device`), the same calls run on a copy of the model there,
vectorised or one worker after another (`vectorize`); parameters and batches go to the
device and the gradients come back into the workers' CPU buffers. On the CPU the same
code runs with the CPU as the device (the dry test of the device path).

Models vmap cannot run correctly (BatchNorm in training mode, dropout or any
other randomness, in-place updates of module state) are detected, by
inspection and by a first call checked against the exact path, and run one
by one instead, with the reason kept (`fallback`), never silently wrong.
"""
from __future__ import annotations

import copy
import time
from typing import Optional, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from psgd.config import ConfigError
from psgd.config.sim import GradientDevice
from psgd.sim.binding import ModelBinding

__all__ = ["BatchedGradients", "RTOL", "gradient_device", "initialize_functorch", "max_relative_error",
           "static_fallback"]

RTOL = 1e-5  # batched against exact: per tensor, relative to its largest exact gradient


def initialize_functorch() -> float:
    """torch.func's one-time setup in this process (about a second of CPU on
    the first vmap, whatever the model): done ahead so that a cost measurement
    counts it once, apart. Returns the CPU seconds it took."""
    t0 = time.process_time()
    vmap(grad(lambda w, x: (w * x).sum()))(torch.ones(2, 2), torch.ones(2, 2))
    return time.process_time() - t0


def gradient_device(choice: GradientDevice) -> torch.device:
    """The device `sim.gradient_device` names here; ConfigError (one line) for cuda without one."""
    choice = GradientDevice(choice)
    cuda = torch.cuda.is_available()
    if choice is GradientDevice.CUDA and not cuda:
        raise ConfigError("sim.gradient_device", "cuda, but torch sees no CUDA device on this machine "
                          "(use cpu, or auto to take one where there is one)")
    return torch.device("cuda" if choice is GradientDevice.CUDA or choice is GradientDevice.AUTO and cuda else "cpu")


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
    versions (flat per-shard tensors, as the workers hold them) at once, on
    `device`: in one vmapped call, or (`vectorize` False) one version after another."""

    def __init__(self, model: nn.Module, binding: ModelBinding, task, device: Optional[torch.device] = None,
                 vectorize: bool = True):
        device = device or torch.device("cpu")
        self.binding, self.task, self.device, self.vectorize = binding, task, device, vectorize
        self.model = copy.deepcopy(model).to(device)  # its buffers where the parameters will be
        self.names = [n for n, _ in model.named_parameters()]
        one = grad(self._loss, has_aux=True)
        self._grad = vmap(one, in_dims=(0, 0, 0), randomness="error") if vectorize else one

    def _loss(self, params: dict, x: torch.Tensor, y: torch.Tensor):
        loss = self.task.loss(functional_call(self.model, params, (self.task.inputs(x),)), self.task.targets(y))
        return loss, loss.detach()

    def compute(self, versions: Sequence[Sequence[torch.Tensor]], xs: Sequence[torch.Tensor],
                ys: Sequence[torch.Tensor], out: Sequence[Sequence[torch.Tensor]]) -> list[float]:
        """Worker k's gradient at `versions[k]` on (xs[k], ys[k]) into its zeroed
        flat per-shard buffers `out[k]`; returns the K losses."""
        dev = self.device
        per_worker = [self.binding.tensors(v) for v in versions]
        if not self.vectorize:
            losses = []
            for params, x, y, flat in zip(per_worker, xs, ys, out):
                grads, loss = self._grad({n: p.to(dev) for n, p in zip(self.names, params)}, x.to(dev), y.to(dev))
                self.binding.scatter_grads([grads[n] for n in self.names], flat)
                losses.append(loss.item())
            return losses
        stacked = {n: torch.stack([p[i] for p in per_worker]).to(dev) for i, n in enumerate(self.names)}
        grads, losses = self._grad(stacked, torch.stack(list(xs)).to(dev), torch.stack(list(ys)).to(dev))
        for k, flat in enumerate(out):
            self.binding.scatter_grads([grads[n][k] for n in self.names], flat)
        return losses.tolist()
