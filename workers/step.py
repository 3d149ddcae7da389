"""One worker step, written once for the worker process and the virtual cluster.

A step is `forward_backward` (the loss of one batch, its gradients accumulated
into the model's `.grad`) and then `step_outcome`: what the step sends. Plain
training sends the step's gradients; under local updates the step is one step
of the worker's own optimizer, and only a completed round sends, its parameter
delta. The worker role (workers/worker.py) and `psgd.Optimizer.step` run these
functions, and so does every simulated worker (psgd.sim.executor): a change
here changes both, and `psgd replay` repeats either bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from psgd.workers.local_rounds import LocalRounds

__all__ = ["Outgoing", "forward_backward", "step_outcome", "flush_outcome"]


def forward_backward(task, model: nn.Module, batch: tuple, device: Optional[torch.device] = None) -> torch.Tensor:
    """The loss of `batch` (the loader's (x, y)) under `task` (a psgd.tasks task), after
    backward has accumulated its gradients into the model's `.grad`. `device`: where the
    inputs go first (None: they stay where the loader made them)."""
    x, y = batch
    x, y = task.inputs(x), task.targets(y)
    if device is not None:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = task.loss(model(x), y)
    loss.backward()
    return loss


@dataclass(frozen=True)
class Outgoing:
    """What a step pushes to the shards."""
    tensors: list[torch.Tensor]  # one flat fp32 tensor per shard: the gradients, or a round's delta
    steps: int                   # training steps behind them (a local round's length)


def step_outcome(local: Optional[LocalRounds], gradients: Callable[[], list[torch.Tensor]]) -> Optional[Outgoing]:
    """After backward: the push this step makes, None while a local round goes on.
    `local`: the worker's rounds under local updates (None: plain training);
    `gradients()`: the step's flat gradients per shard, read only when they are sent."""
    if local is None:
        return Outgoing(gradients(), 1)
    if not local.step():
        return None
    return Outgoing(local.delta(), local.taken)


def flush_outcome(local: Optional[LocalRounds]) -> Optional[Outgoing]:
    """The shorter round of a worker whose budget ended mid-round, however few
    steps it has; None when there is none (plain training has no rounds)."""
    if local is None or not local.taken:
        return None
    return Outgoing(local.delta(), local.taken)
