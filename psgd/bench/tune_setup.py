"""What `psgd tune staleness` fixes before it compares bounds.

- On the virtual cluster: one step time for every run (resolved once as a
  launch resolves it: the config's, FLOPs on its device, or measured here when
  it says `measure`, so no run's bound is judged on a different simulated machine), each run
  stopping once the target is held (nothing later changes its time to
  target), and evaluations dense enough to tell bounds apart: an evaluation
  costs no simulated time, so the tuner evaluates at least 50 times over the
  run's least span (steps per worker x the larger of the step time and the
  time a shard takes to serve one push from every worker).
- Each bound at its own best rate: on the virtual cluster, where a run costs
  seconds, every bound runs one seed at each rate of a small grid (the
  configured rate x GRID_FACTORS, or --lr-grid), and keeps the rate with the
  lowest held time to target (psgd.bench.outcomes.best_lr). Bounds compared at
  one rate fitted to one of them measure the rate, not the staleness.
- Evaluation spacing from the expected time to target: once the grid has run,
  the seeds' evaluations come every 1/EVALS_PER_TARGET of the fastest held time
  the grid saw, so two bounds a few percent apart are resolved (an evaluation
  costs no simulated time). Without a grid (or if no grid run held the
  target), the step-budget spacing above stays.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from psgd.config import Config
from psgd.core.sharding import Layout
from psgd.sim.time_model import TimeModel
from psgd.wire.codecs.runs import push_plans

__all__ = ["sim_overrides", "rate_grid", "eval_spacing_s", "EVALS_PER_SPAN", "EVALS_PER_TARGET", "GRID_FACTORS"]

EVALS_PER_SPAN = 50
EVALS_PER_TARGET = 50               # evaluation spacing: 2% of the expected time to target
GRID_FACTORS = (0.25, 0.5, 1.0, 2.0)  # each bound's rate grid, as multiples of the configured rate


def sim_overrides(cfg: Config, measure: Callable[[], tuple[float, Layout]]) -> list[str]:
    """The settings every simulated run of the tuner shares (empty off the simulator).
    `measure()`: (the step time in ms, before sim.speedup, the model's layout over the shards)."""
    if cfg.cluster.launcher != "sim":
        return []
    resolved_ms, layout = measure()
    compute_ms = float(f"{resolved_ms:.6g}")
    time = TimeModel.for_run(cfg, compute_ms, push_plans(cfg.wire, layout, cfg.local.enabled))
    # The slowest shard's: each push decoded by its own codecs (the shards' codecs may differ).
    round_s = cfg.cluster.workers * max(time.service_s(n, shard=s) for s, n in enumerate(layout.shard_sizes))
    span_s = cfg.train.steps_per_worker * max(time.compute_s, round_s)
    sets = [f"sim.compute_ms={compute_ms}", "train.stop_at_target=true"]
    every = min(cfg.eval.every_s, span_s / EVALS_PER_SPAN) if cfg.eval.enabled else None
    if every is not None and every < cfg.eval.every_s:
        sets.append(f"eval.every_s={every:.6g}")
    return sets


def rate_grid(lr: float, given: Optional[Sequence[float]] = None) -> list[float]:
    """The rates each bound tries: `given` (--lr-grid), else lr x GRID_FACTORS."""
    if given:
        return sorted(set(given))
    return sorted({float(f"{lr * f:.6g}") for f in GRID_FACTORS})


def eval_spacing_s(expected_target_s: float) -> Optional[float]:
    """Evaluation spacing for runs expected to hold the target after `expected_target_s`
    (None when that is unknown)."""
    if not math.isfinite(expected_target_s) or expected_target_s <= 0:
        return None
    return float(f"{expected_target_s / EVALS_PER_TARGET:.6g}")
