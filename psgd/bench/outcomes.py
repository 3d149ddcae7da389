"""From finished runs to the numbers a convergence report states: each run's
time to a held target, each mode's median with a bootstrap interval, its ratio
to BSP, and sentences that say only what the intervals support.

Pure functions over plain values (eval events as dicts), so they are tested
without running anything.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

from psgd.bench.stats import Interval, median_ci
from psgd.bench.verdict import Judgement, Outcome, Sample, judge
from psgd.core.target import METRICS, TargetHold, held_target_time, metric_series
from psgd.core.update_size import examples_per_update  # noqa: F401 (re-exported)

__all__ = ["examples_per_update", "RunOutcome", "ModeStats", "mode_stats",
           "conclusion", "resolution_check", "censored_time_s", "describe_target", "best_lr"]

def describe_target(metric: str, value: float) -> str:
    return f"test accuracy {value:g}" if metric == "accuracy" else f"validation loss {value:g}"


@dataclass(frozen=True)
class RunOutcome:
    label: str
    seed: int
    lr: float
    time_to_target_s: Optional[float]    # held target; None = not reached
    final_metric: Optional[float]
    train_time_s: float
    examples: int                        # examples behind the applied updates
    wire_bytes_per_example: Optional[float] = None  # what the workers pushed per training example

    @classmethod
    def from_evals(cls, label: str, seed: int, lr: float, evals: Sequence[dict], metric: str, target: float,
                   rule: TargetHold, train_time_s: float, updates: float, per_update: int,
                   wire_bytes_per_example: Optional[float] = None) -> "RunOutcome":
        ts, vs = metric_series(evals, metric)
        higher = METRICS[metric][1]
        ttt = held_target_time(ts, vs, target, higher, rule)
        final = vs[-1] if vs else None
        if final is not None and math.isnan(final):   # a diverged run: the worst value its metric has
            final = -math.inf if higher else math.inf
        return cls(label, seed, lr, ttt, final, train_time_s, int(round(updates * per_update)),
                   wire_bytes_per_example)


@dataclass(frozen=True)
class ModeStats:
    label: str
    lr: float
    seeds: int
    reached: int
    time: Interval                 # time to target; inf where not reached
    final: Optional[Interval]      # final metric
    ratio_to_bsp: Optional[float]  # median time / BSP's median time
    times: tuple[float, ...] = ()  # every seed's time to target (inf: not reached), for ratio intervals
    caps: tuple[float, ...] = ()   # every seed's run length: a not-reached seed's time is censored there
    finals: tuple[float, ...] = () # every seed's final metric (seeds without one left out)
    seed_ids: tuple[int, ...] = () # every seed's run.seed, in the order of `times`

    def sample(self) -> Sample:
        """The seeds' times for psgd.bench.verdict.judge, not-reached seeds censored at their run's end."""
        return Sample.of(self.times, self.caps or None, self.seed_ids or None)

    def versus(self, other: "ModeStats") -> Judgement:
        return judge(self.sample(), other.sample())


def mode_stats(outcomes: Sequence[RunOutcome], baseline: str = "bsp") -> dict[str, ModeStats]:
    """Per label (in first-seen order). Every label's runs must share one lr."""
    groups: dict[str, list[RunOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.label, []).append(o)
    out = {}
    for label, runs in groups.items():
        lrs = {o.lr for o in runs}
        if len(lrs) != 1:
            raise ValueError(f"mode_stats: {label} mixes learning rates {sorted(lrs)}; pick one per mode first")
        times = [o.time_to_target_s if o.time_to_target_s is not None else math.inf for o in runs]
        finals = [o.final_metric for o in runs if o.final_metric is not None]
        out[label] = ModeStats(label, runs[0].lr, len(runs), sum(o.time_to_target_s is not None for o in runs),
                               median_ci(times), median_ci(finals) if finals else None, None, tuple(times),
                               tuple(o.train_time_s for o in runs), tuple(finals), tuple(o.seed for o in runs))
    base = out.get(baseline)
    if base is not None and math.isfinite(base.time.median) and base.time.median > 0:
        for label, s in out.items():
            if math.isfinite(s.time.median):
                out[label] = dataclasses.replace(s, ratio_to_bsp=s.time.median / base.time.median)
    return out


def conclusion(stats: dict[str, ModeStats], target_text: str, baseline: str = "bsp", unit: str = " s") -> list[str]:
    """Sentences, one per verdict of psgd.bench.verdict.judge against the
    baseline (faster, slower, tied, inconclusive), with each mode's evidence;
    times in `unit` (" simulated s" on the virtual cluster)."""
    def _t(iv: Interval) -> str:
        return iv.time_text(unit)
    if baseline not in stats:
        return [f"No {baseline} runs finished, so there is no baseline to compare with."]
    base = stats[baseline]
    lines = [f"Time to hold {target_text}, median [95% CI] over seeds; {baseline}: {_t(base.time)}."]
    if base.reached < base.seeds:
        lines.append(f"{baseline} held {target_text} in only {base.reached} of {base.seeds} seeds.")
    groups: dict[Outcome, list[str]] = {o: [] for o in Outcome}
    for label, s in stats.items():
        if label == baseline:
            continue
        j = s.versus(base)
        groups[j.outcome].append(f"{label} ({_t(s.time)}; {j.text()})")
    heads = {Outcome.FASTER: f"Faster than {baseline} (ratio interval below 1 - margin)",
             Outcome.SLOWER: f"Slower than {baseline} (ratio interval above 1 + margin)",
             Outcome.TIED: f"Tied with {baseline} (ratio interval inside the margin)",
             Outcome.INCONCLUSIVE: f"Inconclusive against {baseline} with these seeds"}
    for outcome, entries in groups.items():
        if entries:
            lines.append(f"{heads[outcome]}: " + "; ".join(entries) + ".")
    return lines


def resolution_check(eval_times: Sequence[Sequence[float]], baseline_median_s: float,
                     limit_fraction: float = 0.05, baseline_at_least_s: Optional[float] = None
                     ) -> tuple[float, bool]:
    """(median spacing between evaluations over all runs, whether it is at most
    limit_fraction of the baseline's median time to target). A baseline that
    did not hold the target takes longer than its runs lasted: pass that
    (`baseline_at_least_s`) and the spacing is judged against it instead."""
    gaps = sorted(b - a for ts in eval_times for a, b in zip(ts, ts[1:]))
    if not gaps:
        return math.inf, False
    mid = len(gaps) // 2
    spacing = gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2
    reference = baseline_median_s if math.isfinite(baseline_median_s) else baseline_at_least_s
    ok = reference is not None and math.isfinite(reference) and spacing <= limit_fraction * reference
    return spacing, ok


def censored_time_s(outcomes: Sequence[RunOutcome]) -> Optional[float]:
    """The least a label's median time to target can be when that median is
    'not reached': its shortest run that did not hold the target (None if all did)."""
    times = [o.train_time_s for o in outcomes if o.time_to_target_s is None]
    return min(times) if times else None


def best_lr(outcomes: Sequence[RunOutcome], higher_is_better: bool = True) -> dict[str, float]:
    """Each label's best learning rate: the lowest median time to target
    (not reached = inf), then the better median final metric, then the
    smaller rate."""
    by: dict[str, dict[float, list[RunOutcome]]] = {}
    for o in outcomes:
        by.setdefault(o.label, {}).setdefault(o.lr, []).append(o)
    best = {}
    for label, per_lr in by.items():
        def key(lr, per_lr=per_lr):
            runs = per_lr[lr]
            t = median_ci([o.time_to_target_s if o.time_to_target_s is not None else math.inf for o in runs]).median
            finals = [o.final_metric for o in runs if o.final_metric is not None]
            f = median_ci(finals).median if finals else (-math.inf if higher_is_better else math.inf)
            return (t, -f if higher_is_better else f, lr)
        best[label] = min(per_lr, key=key)
    return best
