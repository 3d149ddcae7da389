"""The FLOPs of one worker's training step: forward and backward on one batch.

Counted once per run with torch.utils.flop_counter.FlopCounterMode on the
run's own model and the first batch rank 0 would take: a pure function of the
config (the model's shapes and the batch size), never of this machine. It
counts what FlopCounterMode counts (matrix products, convolutions, attention):
element-wise work is left to the device profile's efficiency.
"""
from __future__ import annotations

from psgd.config import Config
from psgd.tasks import build_model
from psgd.tasks.loaders import train_loader
from psgd.workers.step import forward_backward

__all__ = ["step_flops"]


def step_flops(cfg: Config, task) -> int:
    """FLOPs of forward + backward of one `cfg.task.batch_size` batch (no parameters change)."""
    from torch.utils.flop_counter import FlopCounterMode
    model = build_model(cfg, task)
    batch = next(train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed))
    with FlopCounterMode(display=False) as counter:
        forward_backward(task, model, batch)  # the step every worker takes
    return int(counter.get_total_flops())
