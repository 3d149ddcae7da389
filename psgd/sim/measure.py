"""The per-step compute time of the run's own model on this machine."""
from __future__ import annotations

import statistics
import time

from psgd.config import Config
from psgd.tasks import build_model
from psgd.tasks.loaders import train_loader
from psgd.workers.step import forward_backward

__all__ = ["measure_compute_ms"]

def measure_compute_ms(cfg: Config, task) -> float:
    """Median forward+backward time of one worker's batch over `sim.warmup_steps`
    steps, after one untimed step (first-call allocations). Uses its own model and
    batches, so the run's data order is untouched."""
    model = build_model(cfg, task)
    batches = train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed)
    times = []
    for i in range(cfg.sim.warmup_steps + 1):
        batch = next(batches)
        t0 = time.process_time()  # CPU time: on a shared machine wall time counts others' turns
        model.zero_grad(set_to_none=False)
        forward_backward(task, model, batch)  # the step every worker takes
        if i:
            times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3
