"""`psgd bench sim`: the simulator's own cost against the gradient compute it executes.

Bookkeeping is everything the simulator spends real time on besides the
forward+backward passes it must execute anyway: the event queue, the shard
rules, the codecs, parameter copies and data loading. Evaluation is timed
apart and left out of both.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from psgd.config import Config, override_config
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel

__all__ = ["CostPoint", "measure_cost"]


@dataclass(frozen=True)
class CostPoint:
    workers: int
    worker_steps: int
    total_s: float        # real seconds of the run (evaluation excluded)
    gradient_s: float     # of which forward+backward
    overhead: float       # (total - gradient) / gradient

    def as_dict(self) -> dict:
        return asdict(self)


def measure_cost(cfg: Config, workers: int, steps_per_worker: int) -> CostPoint:
    """One simulated run of `cfg` at `workers` workers, without evaluation."""
    cfg = override_config(cfg, [f"cluster.workers={workers}", f"train.steps_per_worker={steps_per_worker}",
                                "eval.enabled=false", "train.max_time_s=1e12", "workers.slowdown={}",
                                "workers.transient=[]"])
    torch.set_num_threads(cfg.run.threads)  # one thread, as every psgd process
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms or 1.0),
                    steps_per_worker=steps_per_worker, max_time_s=cfg.train.max_time_s, eval_every_s=None)
    t0 = time.process_time()
    result = engine.run()
    total = time.process_time() - t0 - ex.evaluate_s
    return CostPoint(workers, result.steps, round(total, 4), round(ex.gradient_s, 4),
                     round((total - ex.gradient_s) / ex.gradient_s, 4))
