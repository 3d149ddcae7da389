"""What a simulated run refuses before it starts: values it cannot finish in bounded time.

The virtual cluster executes every worker's real forward and backward and every
evaluation in one process, so a run's real cost grows with the workers it holds
and the evaluations it makes; a value that makes either astronomically large is
refused naming its key, instead of running for ever. (Worker counts are bounded
in the config itself: psgd.config.schema, MAX_SIM_WORKERS.)
"""
from __future__ import annotations

from typing import Optional

from psgd.config import Config, ConfigError

__all__ = ["MAX_EVALUATIONS", "check_evaluations"]

# Evaluations one simulated run may make: each scores the whole test set for
# real (milliseconds for the built-in tasks), so 10,000 is already minutes.
MAX_EVALUATIONS = 10_000


def check_evaluations(cfg: Config, mean_compute_s: float) -> None:
    """Refuse eval.every_s when the run's shortest span (train.max_time_s, or
    every worker's steps at the mean step time, whichever ends first) holds more
    than MAX_EVALUATIONS evaluations. Raises ConfigError naming eval.every_s."""
    if not cfg.eval.enabled:
        return
    span_s = min(cfg.train.max_time_s, cfg.train.steps_per_worker * mean_compute_s)
    count = span_s / cfg.eval.every_s
    if count > MAX_EVALUATIONS:
        raise ConfigError("eval.every_s", f"{cfg.eval.every_s:g} s would evaluate about {count:.3g} times in the "
                          f"run's {span_s:.3g} simulated seconds (the lesser of train.max_time_s and "
                          f"train.steps_per_worker x the step time); at most {MAX_EVALUATIONS} evaluations: "
                          f"set eval.every_s >= {span_s / MAX_EVALUATIONS:.3g} or eval.enabled: false")


def evaluations_exceeded(count: int, every_s: Optional[float]) -> Optional[ConfigError]:
    """The error for a run whose evaluations passed the bound while it ran (a span
    longer than the estimate: queues, stragglers), or None."""
    if count <= MAX_EVALUATIONS:
        return None
    return ConfigError("eval.every_s", f"{every_s:g} s: the run passed {MAX_EVALUATIONS} evaluations before "
                       "it ended; evaluate less often (or set eval.enabled: false)")
