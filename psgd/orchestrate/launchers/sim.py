"""`psgd launch --on sim` (cluster.launcher: sim): the job on the virtual cluster.

Leaves the run directory a real launch leaves (config.yaml, metrics.jsonl,
metrics.csv, summary.json, model.pt, TensorBoard when asked), written by the
same summary and export code, with every time in simulated seconds and
`"clock": "simulated"` in summary.json, and under "sim_compute" the step
time the run used and where it came from (given, FLOPs on a device, or
measured here: then also written into config.yaml).
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from psgd.config import Config, ConfigError, dump_config
from psgd.orchestrate.launchers import LaunchResult
from psgd.orchestrate.records.metrics_export import MetricsExport
from psgd.orchestrate.records.summary import summarize, time_to_target
from psgd.orchestrate.records.summary_file import write_summary
from psgd.runtime.files import atomic_write
from psgd.sim.allreduce import AllReduceSim
from psgd.sim.compute import ResolvedCompute, resolve_compute
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.limits import check_evaluations
from psgd.sim.step_times import RecordedSteps, StepTimes, load_recorded_steps
from psgd.sim.time_model import TimeModel
from psgd.tasks import load_task
from psgd.wire.codecs import encoding_of

__all__ = ["REQUIRES", "SimLauncher", "TimePlan", "launcher_class", "plan_times"]

REQUIRES: dict[str, str] = {}


def launcher_class() -> type:
    return SimLauncher


@dataclass(frozen=True)
class TimePlan:
    """Everything a simulated run's times come from, checked."""
    compute: ResolvedCompute
    recorded: Optional[RecordedSteps]
    time_model: TimeModel
    step_times: StepTimes


def plan_times(cfg: Config, task) -> TimePlan:
    """The run's step time, variability and time model, refusing (ConfigError naming the
    key) what could not finish in bounded time or would not give finite times."""
    compute = resolve_compute(cfg, task)
    cfg = compute.cfg
    recorded = load_recorded_steps(cfg.sim.step_times_from, cfg.base_dir) if cfg.sim.step_times_from else None
    time_model = TimeModel.from_config(cfg.sim, compute.compute_ms, encoding_of(cfg.wire))
    mean_step_s = time_model.compute_s if recorded is None else statistics.fmean(
        t for times in recorded.by_rank for t in times) / cfg.sim.speedup
    check_evaluations(cfg, mean_step_s)
    return TimePlan(compute, recorded, time_model, StepTimes.for_run(cfg, time_model, recorded))


class SimLauncher:
    resumable = False  # a simulated run is repeated (bit for bit), not resumed

    def __init__(self, cfg: Config, run_dir: Path, on_progress: Optional[Callable] = None, resume: bool = False,
                 child_main=None, lock=None):
        """`lock`: the run directory's lock, held by the caller (psgd.runtime.run_lock)."""
        self.cfg, self.run_dir = cfg, Path(run_dir)

    @staticmethod
    def check_config(cfg: Config) -> None:
        """Raises ConfigError (naming the key) for what the virtual cluster cannot run in
        bounded time, before a run directory exists. A step time to be measured is
        checked once measured, in the run itself."""
        if cfg.sim.compute_ms == "measure":
            return
        plan_times(cfg, load_task(cfg, None, splits=("train",)) if cfg.sim.compute_ms is None else None)

    def run(self) -> LaunchResult:
        """Raises nothing for a value the time model refuses: a LaunchResult with code 2 names the key."""
        try:
            return self._run()
        except ConfigError as exc:
            return LaunchResult(2, f"config error: {exc}", self.run_dir, None)

    def _run(self) -> LaunchResult:
        started = time.perf_counter()
        torch.set_num_threads(self.cfg.run.threads)  # one thread, as every psgd process
        allreduce = not self.cfg.consistency.mode.on_servers
        ex = None if allreduce else Executor(self.cfg, None)
        plan = plan_times(self.cfg, load_task(self.cfg, None, splits=("train",)) if allreduce else ex.task)
        compute, recorded, time_model, step_times = plan.compute, plan.recorded, plan.time_model, plan.step_times
        cfg = compute.cfg
        atomic_write(self.run_dir / "config.yaml", dump_config(cfg))
        events: list[dict] = []
        export = MetricsExport(self.run_dir, cfg, t0=0.0)
        evals: list[dict] = []

        with open(self.run_dir / "metrics.jsonl", "w") as metrics:
            def emit(e: dict) -> None:
                events.append(e)
                metrics.write(json.dumps(e) + "\n")
                export.add(e)

            def stop(record: dict) -> bool:
                evals.append(record)
                return cfg.train.stop_at_target and time_to_target(evals, cfg.train) is not None

            every = cfg.eval.every_s if cfg.eval.enabled else None
            try:
                if allreduce:
                    runner = AllReduceSim(cfg, time_model, emit, stop, step_times)
                    result = runner.run(cfg.train.steps_per_worker, cfg.train.max_time_s, every)
                else:
                    runner = ex
                    result = Engine(ex, time_model, steps_per_worker=cfg.train.steps_per_worker,
                                    max_time_s=cfg.train.max_time_s, eval_every_s=every, emit=emit, stop=stop,
                                    step_times=step_times).run()
            finally:
                export.close()
        torch.save(runner.state_dict(), self.run_dir / "model.pt")
        summary = summarize(cfg, events, result.end_s, clock="simulated")
        summary["real_time_s"] = round(time.perf_counter() - started, 3)  # what the simulation took here
        summary["failure"] = None
        summary["sim_compute"] = {**compute.describe(),
                                  **({"step_times": recorded.describe()} if recorded is not None else {})}
        unwritten = write_summary(self.run_dir / "summary.json", summary)
        if unwritten:
            return LaunchResult(1, f"summary.json not written: {unwritten}", self.run_dir, summary)
        return LaunchResult(0, "", self.run_dir, summary)
