"""Where a simulated run's times come from, resolved and checked before it starts.

The step time (psgd.sim.compute), a real run's recorded steps if replayed, the
time model and the per-step times, refusing (ConfigError naming the key) what
could not finish in bounded time or would not give finite times (psgd.sim.limits).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from psgd.config import Config
from psgd.core.sharding import Layout, layout_for_module
from psgd.sim.batched import gradient_device
from psgd.sim.compute import ResolvedCompute, resolve_compute
from psgd.sim.faults import check_faults
from psgd.sim.limits import check_evaluations
from psgd.sim.step_times import RecordedSteps, StepTimes, load_recorded_steps
from psgd.sim.time_model import TimeModel
from psgd.wire.codecs.runs import Plan, push_plans

__all__ = ["TimePlan", "check_plan", "plan_times", "model_plans"]


@dataclass(frozen=True)
class TimePlan:
    compute: ResolvedCompute
    recorded: Optional[RecordedSteps]
    time_model: TimeModel
    step_times: StepTimes


def plan_times(cfg: Config, task, plans: Sequence[Plan]) -> TimePlan:
    """`task`: the run's loaded task (None when sim.compute_ms is a number: nothing is counted);
    `plans`: each shard's push runs (the executor's; none under all-reduce, or before a layout)."""
    compute = resolve_compute(cfg, task)
    cfg = compute.cfg
    recorded = load_recorded_steps(cfg.sim.step_times_from, cfg.base_dir) if cfg.sim.step_times_from else None
    time_model = TimeModel.for_run(cfg, compute.compute_ms, plans)
    mean_step_s = time_model.compute_s if recorded is None else statistics.fmean(
        t for times in recorded.by_rank for t in times) / cfg.sim.speedup
    check_evaluations(cfg, mean_step_s)
    return TimePlan(compute, recorded, time_model, StepTimes.for_run(cfg, time_model, recorded))


def check_plan(cfg: Config) -> None:
    """Raises ConfigError for a config whose times cannot be planned, before any file is
    written. A step time to be measured is checked once measured, and the push codecs' times
    once the layout is known, in the run itself."""
    check_faults(cfg)
    gradient_device(cfg.sim.gradient_device)
    if cfg.sim.compute_ms == "measure":
        return
    from psgd.tasks import load_task
    plan_times(cfg, load_task(cfg, None, splits=("train",)) if cfg.sim.compute_ms is None else None, ())


def model_plans(cfg: Config, task) -> tuple[Layout, list[Plan]]:
    """The layout of `cfg`'s model over its shards and each shard's push runs, as its real
    client and shards derive them; `task`: the loaded task or its shape (psgd.tasks.task_shape)."""
    from psgd.tasks import build_model
    layout = layout_for_module(build_model(cfg, task), cfg.cluster.num_servers)
    return layout, push_plans(cfg.wire, layout, cfg.local.enabled)
