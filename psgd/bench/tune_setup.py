"""What `psgd tune staleness` fixes before it compares bounds.

- On the virtual cluster: one step time for every run (resolved once as a
  launch resolves it: the config's, FLOPs on its device, or measured here when
  it says `measure`, so no run's bound is judged on a different simulated machine), each run
  stopping once the target is held (nothing later changes its time to
  target), and evaluations dense enough to tell bounds apart: an evaluation
  costs no simulated time, so the tuner evaluates at least 50 times over the
  run's least span (steps per worker x the larger of the step time and the
  time a shard takes to serve one push from every worker).
- On the virtual cluster, where a probe costs seconds: a learning rate the bounds can train at. Bounds compared at a
  rate where every one of them diverges tell nothing about staleness (64
  asynchronous workers apply every gradient about 63 updates late; a rate
  fit for 4 workers collapses the model). The loosest bound runs first with
  the configured rate for 1/`PROBE_FRACTION` of the steps; if it did not
  train (non-finite loss, or a final test loss not at least `MIN_LOSS_DROP`
  below the first evaluation's), the rate is halved, up to `MAX_HALVINGS` times. The target is never changed, and
  the report says which rate was used and why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from psgd.config import Config
from psgd.sim.time_model import TimeModel
from psgd.wire.codecs import encoding_of

__all__ = ["RateCheck", "check_rate", "sim_overrides", "trained", "EVALS_PER_SPAN", "MIN_LOSS_DROP", "MAX_HALVINGS",
           "PROBE_FRACTION"]

EVALS_PER_SPAN = 50
MIN_LOSS_DROP = 0.10
MAX_HALVINGS = 4
PROBE_FRACTION = 4


def sim_overrides(cfg: Config, measure: Callable[[], tuple[float, int]]) -> list[str]:
    """The settings every simulated run of the tuner shares (empty off the simulator).
    `measure()`: (the step time in ms, before sim.speedup, the model's parameter count)."""
    if cfg.cluster.launcher != "sim":
        return []
    resolved_ms, numel = measure()
    compute_ms = float(f"{resolved_ms:.6g}")
    time = TimeModel.from_config(cfg.sim, compute_ms, encoding_of(cfg.wire))
    round_s = cfg.cluster.workers * time.service_s(-(-numel // cfg.cluster.num_servers))
    span_s = cfg.train.steps_per_worker * max(time.compute_s, round_s)
    sets = [f"sim.compute_ms={compute_ms}", "train.stop_at_target=true"]
    every = min(cfg.eval.every_s, span_s / EVALS_PER_SPAN) if cfg.eval.enabled else None
    if every is not None and every < cfg.eval.every_s:
        sets.append(f"eval.every_s={every:.6g}")
    return sets


def trained(evals: list[dict]) -> bool:
    """Whether a run learnt at all: finite losses and a final test loss at least
    MIN_LOSS_DROP below the first evaluation's."""
    losses = [e.get("test_loss") for e in evals if e.get("test_loss") is not None]
    if len(losses) < 2 or not all(math.isfinite(x) for x in losses):
        return False
    return losses[-1] <= (1 - MIN_LOSS_DROP) * losses[0]


@dataclass
class RateCheck:
    lr: float                                          # the rate every bound runs at
    tried: list[tuple[float, bool, str]] = field(default_factory=list)  # (lr, trained, what the probe showed)

    @property
    def changed(self) -> bool:
        return len(self.tried) > 1

    def text(self, bound: int) -> str:
        shown = "; ".join(f"lr {lr:g}: {what}" for lr, _, what in self.tried)
        if not self.changed:
            return (f"Learning rate: {self.lr:g} as configured (s={bound}, the loosest bound, trained in "
                    f"1/{PROBE_FRACTION} of the steps: {shown}).")
        if not self.tried[-1][1]:
            return (f"Learning rate: no rate tried let s={bound}, the loosest bound, train ({shown}); "
                    f"the bounds ran at {self.lr:g}.")
        return (f"Learning rate: {self.lr:g}, the configured rate halved until s={bound}, the loosest bound, "
                f"trained in 1/{PROBE_FRACTION} of the steps ({shown}). At a rate where every bound diverges "
                "the bounds cannot be compared.")


def check_rate(lr: float, probe: Callable[[float], tuple[object, list[dict]]]) -> RateCheck:
    """`probe(lr)` runs the loosest bound's first seed at `lr` for 1/PROBE_FRACTION of
    the steps: (its run, its evaluations)."""
    check = RateCheck(lr)
    for _ in range(MAX_HALVINGS + 1):
        run, evals = probe(check.lr)
        ok = run is not None and trained(evals)
        losses = [e.get("test_loss") for e in evals if e.get("test_loss") is not None]
        what = ("the run failed" if run is None else
                f"test loss {losses[0]:.3g} -> {losses[-1]:.3g}" if len(losses) >= 2 else "no evaluations")
        check.tried.append((check.lr, ok, what))
        if ok:
            return check
        check.lr /= 2
    check.lr = check.tried[0][0]  # none trained: compare at the configured rate and say so
    return check
