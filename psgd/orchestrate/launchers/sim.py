"""`--on sim`: the job on the virtual cluster (psgd.sim), in one process.

Leaves the run directory a real launch leaves (config.yaml, metrics.jsonl,
metrics.csv, summary.json, model.pt, TensorBoard when asked), written by the
same summary and export code, with every time in simulated seconds and
`"clock": "simulated"` in summary.json, and under "sim_compute" the step
time the run used and where it came from (given, FLOPs on a device, or
measured here: then also written into config.yaml).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from psgd.config import Config, ConfigError, dump_config
from psgd.orchestrate.launchers import LaunchResult
from psgd.orchestrate.records.metrics_export import MetricsExport
from psgd.orchestrate.records.summary import summarize, time_to_target
from psgd.orchestrate.records.summary_file import write_summary
from psgd.runtime.files import atomic_write
from psgd.runtime.safe_io import WriteFailed, open_no_follow
from psgd.sim.allreduce import AllReduceSim
from psgd.sim.batched import gradient_device
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.plan import check_plan, plan_times
from psgd.tasks import load_task

__all__ = ["REQUIRES", "SimLauncher", "launcher_class"]

REQUIRES: dict[str, str] = {}


def launcher_class() -> type:
    return SimLauncher


class SimLauncher:
    resumable = False  # a simulated run is repeated (bit for bit), not resumed

    def __init__(self, cfg: Config, run_dir: Path, on_progress: Optional[Callable] = None, resume: bool = False,
                 child_main=None, lock=None):
        """`lock`: the run directory's lock, held by the caller (psgd.runtime.run_lock)."""
        self.cfg, self.run_dir = cfg, Path(run_dir)

    @staticmethod
    def check(cfg: Config) -> None:
        """Refuse (ConfigError naming the key) a time model that cannot finish in bounded
        time or give finite times, before the run directory is used (psgd.sim.plan)."""
        check_plan(cfg)

    def run(self) -> LaunchResult:
        """Raises nothing for a value the time model refuses: a LaunchResult with code 2 names the key."""
        try:
            return self._run()
        except WriteFailed as exc:  # a run file that may not be written (a planted link): one line
            return LaunchResult(1, str(exc), self.run_dir)
        except ConfigError as exc:
            return LaunchResult(2, f"config error: {exc}", self.run_dir)

    def _run(self) -> LaunchResult:
        started = time.perf_counter()
        torch.set_num_threads(self.cfg.run.threads)  # one thread, as every psgd process
        allreduce = not self.cfg.consistency.mode.on_servers
        device = gradient_device(self.cfg.sim.gradient_device)
        ex = None if allreduce else Executor(self.cfg, None, batched=self.cfg.sim.batched, device=device)
        plan = (plan_times(self.cfg, load_task(self.cfg, None, splits=("train",)), ()) if allreduce
                else plan_times(self.cfg, ex.task, ex.plans))
        compute, recorded, time_model, step_times = plan.compute, plan.recorded, plan.time_model, plan.step_times
        cfg = compute.cfg
        atomic_write(self.run_dir / "config.yaml", dump_config(cfg))
        events: list[dict] = []
        export = MetricsExport(self.run_dir, cfg, t0=0.0)
        evals: list[dict] = []
        restarts, kills = 0, None

        with open_no_follow(self.run_dir / "metrics.jsonl", "w") as metrics:
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
                    engine = Engine(ex, time_model, steps_per_worker=cfg.train.steps_per_worker,
                                    max_time_s=cfg.train.max_time_s, eval_every_s=every, emit=emit, stop=stop,
                                    step_times=step_times)
                    result = engine.run()
                    if engine.faults is not None:  # sim.faults: restarts as the real launcher counts them
                        restarts = engine.faults.budget.total
                        kills = [{"t": t, "role": role, "index": index} for t, role, index in engine.faults.kills]
            finally:
                export.close()
        with open_no_follow(self.run_dir / "model.pt", "wb") as model:
            torch.save(runner.state_dict(), model)
        summary = summarize(cfg, events, result.end_s, restarts=restarts, clock="simulated")
        summary["real_time_s"] = round(time.perf_counter() - started, 3)  # what the simulation took here
        summary["failure"] = None
        if kills is not None:  # the kills the failure model made (psgd.sim.faults), in simulated seconds
            summary["sim_kills"] = kills
        summary["sim_compute"] = {**compute.describe(),
                                  **({"step_times": recorded.describe()} if recorded is not None else {})}
        if ex is not None:  # how the workers' gradients were computed (psgd.sim.batched), and why not batched
            summary["sim_gradients"] = {"batched_steps": ex.batched_steps, "fallback": ex.batch_fallback,
                                        "device": ex.device.type if ex.batcher is not None else "cpu"}
        unwritten = write_summary(self.run_dir / "summary.json", summary)
        if unwritten:
            return LaunchResult(1, f"summary.json not written: {unwritten}", self.run_dir, summary)
        return LaunchResult(0, "", self.run_dir, summary)
