"""Time to target, reached *and held*: one rule for summary.json, the
convergence bench and the staleness tuner.

A run that touches its target and falls back has not reached it; see HoldRule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["HoldRule", "meets", "held_target_time", "METRICS", "metric_series", "run_target"]

# metric name in `train.target` -> (key in eval events, higher is better)
METRICS = {"accuracy": ("accuracy", True), "loss": ("test_loss", False)}


@dataclass(frozen=True)
class HoldRule:
    """A target counts as reached at evaluation i when evaluation i meets the
    target and each of the next `hold_evals` evaluations stays within
    `tolerance` of it (accuracy >= target - tolerance; loss <= target +
    tolerance). If the run ends before `hold_evals` more evaluations exist,
    the ones that exist must hold and the run's last evaluation must meet the
    target itself, so a run is never credited with a target it ended below."""
    hold_evals: int = 3
    tolerance: float = 0.01

    def __post_init__(self):
        if self.hold_evals < 0:
            raise ValueError(f"hold_evals must be >= 0, got {self.hold_evals}")
        if self.tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")


def meets(value: float, target: float, higher_is_better: bool, slack: float = 0.0) -> bool:
    return value >= target - slack if higher_is_better else value <= target + slack


def held_target_time(times: Sequence[float], values: Sequence[float], target: float,
                     higher_is_better: bool = True, rule: HoldRule = HoldRule()) -> Optional[float]:
    """The time of the first evaluation where the target is reached and held
    (see HoldRule), or None. `times` must be non-decreasing."""
    if len(times) != len(values):
        raise ValueError("held_target_time: times and values differ in length")
    if any(b < a for a, b in zip(times, times[1:])):
        raise ValueError("held_target_time: times must be non-decreasing")
    n = len(values)
    for i, v in enumerate(values):
        if not meets(v, target, higher_is_better):
            continue
        after = values[i + 1:i + 1 + rule.hold_evals]
        if not all(meets(w, target, higher_is_better, rule.tolerance) for w in after):
            continue
        if len(after) < rule.hold_evals and not meets(values[n - 1], target, higher_is_better):
            continue
        return float(times[i])
    return None


def metric_series(evals: Sequence[dict], metric: str) -> tuple[list[float], list[float]]:
    """(times, values) of the evaluations that report `metric`, by time."""
    key, _ = METRICS[metric]
    pairs = sorted((float(e["t"]), float(e[key])) for e in evals if e.get(key) is not None)
    return [p[0] for p in pairs], [p[1] for p in pairs]


def run_target(train) -> Optional[tuple[str, float, HoldRule]]:
    """(metric, value, rule) a run is timed against: `train.target` when set,
    else `train.target_accuracy` held by the default rule; None without either."""
    if train.target is not None:
        t = train.target
        return t.metric, t.value, HoldRule(t.hold_evals, t.tolerance)
    if train.target_accuracy is not None:
        return "accuracy", train.target_accuracy, HoldRule()
    return None
