"""The setting a convergence report's conclusion holds for, in words: the
workload, heterogeneity, optimizer, budget, target resolution, modes and clock,
and the per-step compute the runs measured."""
from __future__ import annotations

import os
from typing import Sequence

from psgd.bench.run_data import RunData
from psgd.bench.stats import significant
from psgd.bench.target_resolution import target_resolution_line
from psgd.config import Config
from psgd.core.heterogeneity import delay_spec, describe, transient_specs

__all__ = ["setting_lines", "compute_line"]


def setting_lines(cfg: Config, specs: Sequence, per_mode_rates: bool = False) -> list[str]:
    """The setting a report's conclusion holds for, in words; `per_mode_rates`:
    each mode ran at its own rate (a grid, --lr-from), not the configured one."""
    t, o, w = cfg.task, cfg.optimizer, cfg.workers
    args = lambda d: f" {d}" if d else ""  # noqa: E731
    sim = cfg.cluster.launcher == "sim"
    unit = " simulated s" if sim else " s"
    scaling = (f" with linear scaling: bsp and all-reduce step at lr x {cfg.cluster.workers} (x W - b with b backup "
               "workers), the gradients one of their updates averages; ssp/asp at lr"
               if o.lr_scaling == "linear" else ", each mode at its own rate (the lr column)" if per_mode_rates
               else ", the same learning rate in every mode")
    return [
        f"Workload: model `{t.model}`{args(t.model_args)} on dataset `{t.dataset}`{args(t.dataset_args)}, "
        f"{cfg.cluster.workers} workers with batch {t.batch_size} each, {cfg.cluster.num_servers} server shards "
        f"for the parameter-server modes.",
        f"Heterogeneity: {describe(dict(w.slowdown), delay_spec(w), transient_specs(w))}.",
        f"Optimizer: {o.name}{scaling}{', momentum %g' % o.effective_momentum if o.effective_momentum else ''}.",
        f"Budget, the same for every mode: at most {cfg.train.max_time_s:g}{unit} of training and "
        f"{cfg.train.steps_per_worker} steps per worker; evaluation every {significant(cfg.eval.every_s)}{unit}.",
        target_resolution_line(cfg),
        f"Modes: {', '.join(s.label for s in specs)}.",
        ("Clock: simulated (the virtual cluster's time model), so the load of the machine that ran it does not "
         "enter the times." if sim else
         f"Machine: {os.cpu_count()} cores, 1-minute load average at the end {os.getloadavg()[0]:.1f} "
         "(absolute times are specific to it; compare modes by their ratios, measured in one bench)."),
    ]


def compute_line(runs: list[RunData]) -> str:
    """The measured forward/backward time per worker step (the work that
    communication is compared against)."""
    c = sorted(float(e["compute_s"]) for r in runs for e in r.steps if e.get("compute_s") is not None)
    if not c:
        return "Per-step compute: not recorded."
    return (f"Per-step compute (forward and backward of one batch, measured in every step of every run): median "
            f"{1000 * c[len(c) // 2]:.1f} ms, 10th-90th percentile {1000 * c[len(c) // 10]:.1f}-"
            f"{1000 * c[(9 * len(c)) // 10]:.1f} ms.")
