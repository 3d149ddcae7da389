"""Time to target, reached *and held*: one rule for summary.json, the
convergence bench and the staleness tuner.

A run that touches its target and falls back has not reached it; see TargetHold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["TargetHold", "meets", "held_target_time", "METRICS", "metric_series", "run_target", "MetricResolution",
           "metric_resolution", "MIN_ACCURACY_EXAMPLES"]

# metric name in `train.target` -> (key in eval events, higher is better)
METRICS = {"accuracy": ("accuracy", True), "loss": ("test_loss", False)}


@dataclass(frozen=True)
class TargetHold:
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
                     higher_is_better: bool = True, rule: TargetHold = TargetHold()) -> Optional[float]:
    """The time of the first evaluation where the target is reached and held
    (see TargetHold), or None. `times` must be non-decreasing."""
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


def run_target(train) -> Optional[tuple[str, float, TargetHold]]:
    """(metric, value, rule) a run is timed against: `train.target` when set,
    else `train.target_accuracy` held by the default rule; None without either."""
    if train.target is not None:
        t = train.target
        return t.metric, t.value, TargetHold(t.hold_evals, t.tolerance)
    if train.target_accuracy is not None:
        return "accuracy", train.target_accuracy, TargetHold()
    return None


# Below this many held-out examples an accuracy target is coarser than the effects a
# comparison judges: on 360 images one example is 0.28% and the sampling s.d. at 0.93 is 1.3%.
MIN_ACCURACY_EXAMPLES = 2000


@dataclass(frozen=True)
class MetricResolution:
    """How finely a target's metric can tell two runs apart."""
    metric: str
    examples: int              # held-out examples it is measured on
    step: Optional[float]      # the smallest change it can show (accuracy: 1/examples); None for loss
    noise_sd: Optional[float]  # binomial sampling s.d. of the accuracy at the target; None for loss

    @property
    def smooth(self) -> bool:
        return self.metric == "loss" or self.examples >= MIN_ACCURACY_EXAMPLES

    def text(self) -> str:
        if self.metric == "loss":
            return (f"Target resolution: test loss, a mean over {self.examples:,} held-out examples (continuous; "
                    "no threshold steps).")
        line = (f"Target resolution: test accuracy on {self.examples:,} held-out examples moves in steps of "
                f"{self.step:.2%}; its sampling s.d. at the target is {self.noise_sd:.2%}")
        if self.smooth:
            return line + "."
        return (line + f" (fewer than {MIN_ACCURACY_EXAMPLES:,} examples: runs whose curves differ by less than "
                "that can reach the target far apart in time; a loss target (train.target: {metric: loss}) is "
                "smoother).")


def metric_resolution(metric: str, examples: int, target: float) -> MetricResolution:
    if metric not in METRICS:
        raise ValueError(f"metric_resolution: unknown metric {metric!r} (one of {', '.join(METRICS)})")
    if examples < 1:
        raise ValueError(f"metric_resolution: need at least one held-out example, got {examples}")
    if metric == "loss":
        return MetricResolution(metric, examples, None, None)
    p = min(max(target, 0.0), 1.0)
    return MetricResolution(metric, examples, 1.0 / examples, math.sqrt(p * (1 - p) / examples))
