"""The virtual cluster: real training in one process, in simulated time (docs/guides/virtual-cluster.md)."""
from psgd.sim.engine import Engine
from psgd.sim.event_queue import SimResult
from psgd.sim.executor import Executor
from psgd.sim.path_probe import resolve_batched
from psgd.sim.time_model import TimeModel

__all__ = ["Engine", "Executor", "SimResult", "TimeModel", "simulate"]


def simulate(cfg, compute_ms: float, run_dir=None) -> tuple[Executor, SimResult]:
    """Run `cfg` on the virtual cluster with `compute_ms` per step (before sim.speedup)."""
    cfg, _ = resolve_batched(cfg)  # sim.batched: auto, as a run decides it
    ex = Executor(cfg, run_dir, batched=cfg.sim.batched)
    engine = Engine(ex, TimeModel.for_run(cfg, compute_ms, ex.plans),
                    steps_per_worker=cfg.train.steps_per_worker, max_time_s=cfg.train.max_time_s,
                    eval_every_s=cfg.eval.every_s if cfg.eval.enabled else None)
    return ex, engine.run()
