"""`psgd bench sim`: the simulator's own cost against the gradient compute it executes.

Bookkeeping is everything the simulator spends CPU time on besides the
forward+backward passes it must execute anyway: the event queue, the shard
rules, the codecs, parameter copies and data loading. Of it, `shard_s` is the
servers' own handling of pushes and pulls (ShardState: the rules, the update's
arithmetic and its copy-on-write, which the real shards run too); the rest is
the simulator's own.
Evaluation is timed apart and left out of both. CPU seconds of this process,
not wall time: on a shared machine the wall clock also counts other
processes' turns.

`per_step_over_floor`: the simulator's CPU seconds per worker step (all of
it: gradients, shards, bookkeeping) over a plain one-process loop's per step
(loader, forward+backward, SGD step) on the same model and batch. Below 1,
batched gradients (sim.batched) do more than pay for the simulation.

`gemm_peak_fraction`: the floor's counted FLOPs per CPU second over this
core's own matrix-product peak (one thread, square fp32 products). It bounds
what any batching can reach: a path that ran every FLOP at that peak with no
overhead at all would still take `gemm_peak_fraction` of the floor per step.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from psgd.config import Config, override_config
from psgd.sim.batched import initialize_functorch
from psgd.sim.compute import resolve_compute
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel
from psgd.workers.step import forward_backward

__all__ = ["CostPoint", "Floor", "PEAK_ROUNDS", "PEAK_SECONDS", "PEAK_SIZE", "measure_cost", "measure_gemm_peak",
           "measure_plain_loop"]


@dataclass(frozen=True)
class CostPoint:
    workers: int
    worker_steps: int
    total_s: float        # CPU seconds of the run (evaluation excluded)
    gradient_s: float     # of which forward+backward
    shard_s: float        # of which the shards' pushes and pulls (ShardState)
    overhead: float       # (total - gradient) / gradient
    own_overhead: float   # (total - gradient - shard) / gradient: the simulator's own
    batched: bool         # gradients computed in vmapped batches (psgd.sim.batched) throughout
    fallback: Optional[str]  # why not, when batching was asked for
    functorch_init_s: float  # torch.func's one-time setup in this process, left out of total_s

    @property
    def per_step_s(self) -> float:
        return self.total_s / max(1, self.worker_steps)

    def as_dict(self) -> dict:
        return {**asdict(self), "per_step_s": round(self.per_step_s, 7)}


@dataclass(frozen=True)
class Floor:
    steps: int
    per_step_s: float  # CPU seconds per step of the plain loop, all of it
    overhead: float    # (total - forward+backward) / forward+backward
    flops_per_step: int  # forward+backward, as psgd.sim.flops counts them
    gemm_peak_flops: float  # this core's matrix-product FLOPs per CPU second (measure_gemm_peak)

    @property
    def gemm_peak_fraction(self) -> float:
        """The floor's FLOP rate over the core's peak: the least per_step_over_floor any path can reach."""
        return self.flops_per_step / self.per_step_s / self.gemm_peak_flops


PEAK_SIZE = 2048      # square fp32 products this large run at the core's peak (1024-2048 do; 256-512 did not)
PEAK_SECONDS = 1.0    # each timed round runs products back to back for at least this much CPU time
PEAK_ROUNDS = 3       # rounds per size; the best counts (the least disturbed by other processes)


def measure_gemm_peak(sizes: tuple[int, ...] = (PEAK_SIZE,), seconds_each: float = PEAK_SECONDS,
                      rounds: int = PEAK_ROUNDS) -> float:
    """The best FLOPs per CPU second of square fp32 matrix products at `sizes`, over
    `rounds` rounds of at least `seconds_each` each, on the threads torch is set to:
    the core's practical peak for dense work."""
    best = 0.0
    for n in sizes:
        a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        torch.mm(a, b, out=out)  # first call: allocation and kernel choice
        for _ in range(rounds):
            reps, t0 = 0, time.process_time()
            while (elapsed := time.process_time() - t0) < seconds_each:
                torch.mm(a, b, out=out)
                reps += 1
            best = max(best, 2 * n ** 3 * reps / elapsed)
    return best


def measure_cost(cfg: Config, workers: int, steps_per_worker: int, batched: bool = False) -> CostPoint:
    """One simulated run of `cfg` at `workers` workers, without evaluation;
    `batched`: gradients through psgd.sim.batched (else one by one, exactly)."""
    cfg = override_config(cfg, [f"cluster.workers={workers}", f"train.steps_per_worker={steps_per_worker}",
                                "eval.enabled=false", "train.max_time_s=1e12", "workers.slowdown={}",
                                "workers.transient=[]"])
    torch.set_num_threads(cfg.run.threads)  # one thread, as every psgd process
    init_s = initialize_functorch() if batched else 0.0
    ex = Executor(cfg, batched=batched)
    compute_ms = resolve_compute(cfg, ex.task).compute_ms
    engine = Engine(ex, TimeModel.for_run(cfg, compute_ms, ex.plans),
                    steps_per_worker=steps_per_worker, max_time_s=cfg.train.max_time_s, eval_every_s=None)
    t0 = time.process_time()
    result = engine.run()
    total = time.process_time() - t0 - ex.evaluate_s
    g = ex.gradient_s
    return CostPoint(workers, result.steps, round(total, 4), round(g, 4), round(ex.shard_s, 4),
                     round((total - g) / g, 4), round((total - g - ex.shard_s) / g, 4),
                     ex.batcher is not None, ex.batch_fallback, round(init_s, 4))


def measure_plain_loop(cfg: Config, steps: int, gemm_peak_flops: Optional[float] = None) -> Floor:
    """The floor: a plain one-process training loop on the same model and batches
    (loader, zero_grad + forward + backward, torch.optim.SGD step), no simulator.
    `gemm_peak_flops`: the core's peak when already measured (else measured here)."""
    from psgd.sim.flops import step_flops
    from psgd.tasks import build_model, load_task
    from psgd.tasks.loaders import train_loader
    torch.set_num_threads(cfg.run.threads)
    task = load_task(cfg, None, splits=("train",))
    flops = step_flops(cfg, task)
    model = build_model(cfg, task)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optimizer.lr)
    batches = train_loader(task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size, cfg.run.seed)
    gradient = 0.0
    t0 = time.process_time()
    for _ in range(steps):
        batch = next(batches)
        g0 = time.process_time()
        opt.zero_grad(set_to_none=False)
        loss = forward_backward(task, model, batch)  # the step every worker takes
        gradient += time.process_time() - g0
        loss.item()
        opt.step()
    total = time.process_time() - t0
    return Floor(steps, total / steps, round((total - gradient) / gradient, 4), flops,
                 gemm_peak_flops or measure_gemm_peak())
