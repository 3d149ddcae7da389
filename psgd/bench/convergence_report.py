"""What `psgd bench convergence` writes once its runs have finished:
summary.csv (one row per mode, at its chosen learning rate, with the median
time to target, its 95% interval and the ratio to BSP), seeds.csv (one row per
run, every learning rate of a grid included) and report.md, which opens with
the conclusion the intervals support and states the setting it holds for.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from psgd.bench.outcomes import (
    ModeStats,
    RunOutcome,
    best_lr,
    censored_time_s,
    conclusion,
    describe_target,
    mode_stats,
    resolution_check,
)
from psgd.bench.stats import BOOTSTRAP_RESAMPLES, CI_LEVEL, TIE_MARGIN, significant
from psgd.core.target import TargetHold

__all__ = ["TargetSpec", "Analysis", "analyse", "outcome_of", "write_summary_csv", "write_seeds_csv",
           "SUMMARY_FIELDS", "SEED_FIELDS", "report_sections", "grid_table", "mode_table", "caveats",
           "resolution_sentence", "is_simulated"]


@dataclass(frozen=True)
class TargetSpec:
    metric: str            # accuracy | loss
    value: float
    rule: TargetHold

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"

    @property
    def text(self) -> str:
        return describe_target(self.metric, self.value)

    @property
    def rule_text(self) -> str:
        r = self.rule
        side = "at least target - " if self.higher_is_better else "at most target + "
        return (f"the first evaluation that meets the target after which the next {r.hold_evals} evaluations "
                f"stay within {r.tolerance:g} of it ({side}{r.tolerance:g}); a run that ends before "
                f"{r.hold_evals} more evaluations must end meeting the target")


def train_time_s(run) -> float:
    """Training time: the last worker step's time."""
    return max((float(e["t"]) for e in run.steps), default=0.0)


def run_lr(run) -> float:
    return float(run.config.get("optimizer", {}).get("lr", math.nan))


def outcome_of(run, target: TargetSpec) -> RunOutcome:
    return RunOutcome.from_evals(run.label, int(run.summary.get("seed") or 0), run_lr(run), run.training_evals,
                                 target.metric, target.value, target.rule, train_time_s(run),
                                 float(run.summary.get("total_updates") or 0), run.examples_per_update,
                                 run.summary.get("wire_bytes_per_example"))


def bytes_per_example(a: "Analysis", label: str) -> Optional[float]:
    """Median wire bytes per training example of a mode's runs at its chosen rate."""
    values = sorted(o.wire_bytes_per_example for o in a.outcomes
                    if o.label == label and a.chosen_lr[label] == o.lr and o.wire_bytes_per_example is not None)
    return values[len(values) // 2] if values else None


@dataclass
class Analysis:
    target: TargetSpec
    outcomes: list[RunOutcome]          # every run
    chosen_lr: dict[str, float]         # label -> lr the comparison uses
    stats: dict[str, ModeStats]         # at the chosen lr
    grid: bool                          # more than one lr per mode was run
    resolution_s: float
    resolution_ok: bool
    baseline_at_least_s: Optional[float]  # the baseline did not hold the target: it takes longer than this
    simulated: bool = False             # the runs' clock is the virtual cluster's

    @property
    def unit(self) -> str:
        return " simulated s" if self.simulated else " s"

    def chosen_runs(self, runs: Sequence) -> list:
        return [r for r in runs if self.chosen_lr.get(r.label) == run_lr(r)]


def is_simulated(runs: Sequence) -> bool:
    """Whether the runs ran on the virtual cluster (their times are simulated seconds)."""
    return bool(runs) and all((r.config.get("cluster") or {}).get("launcher") == "sim" for r in runs)


def analyse(runs: Sequence, target: TargetSpec, baseline: str = "bsp") -> Analysis:
    outcomes = [outcome_of(r, target) for r in runs]
    grid = any(len({o.lr for o in outcomes if o.label == lab}) > 1 for lab in {o.label for o in outcomes})
    chosen = best_lr(outcomes, target.higher_is_better)
    stats = mode_stats([o for o in outcomes if chosen[o.label] == o.lr], baseline)
    base = stats.get(baseline)
    times = [[float(e["t"]) for e in r.training_evals] for r in runs if chosen.get(r.label) == run_lr(r)]
    at_least = censored_time_s([o for o in outcomes if o.label == baseline and chosen[o.label] == o.lr])
    spacing, ok = resolution_check(times, base.time.median if base else math.inf, baseline_at_least_s=at_least)
    return Analysis(target, outcomes, chosen, stats, grid, spacing, ok, at_least, is_simulated(runs))


SUMMARY_FIELDS = ["label", "lr", "seeds", "reached", "metric", "target", "time_to_target_median_s",
                  "time_to_target_ci_low_s", "time_to_target_ci_high_s", "ratio_to_bsp", "final_metric_median",
                  "final_metric_ci_low", "final_metric_ci_high", "examples_per_s_median", "wire_bytes_per_example_median"]
SEED_FIELDS = ["label", "lr", "seed", "chosen_lr", "time_to_target_s", "final_metric", "train_time_s", "examples",
               "examples_per_s", "wire_bytes_per_example"]


def _num(v: Optional[float], digits: int = 4):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return round(v, digits)


def write_summary_csv(path: Path, a: Analysis) -> None:
    eps = {}
    for o in a.outcomes:
        if a.chosen_lr[o.label] == o.lr and o.train_time_s > 0:
            eps.setdefault(o.label, []).append(o.examples / o.train_time_s)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        for label, s in a.stats.items():
            rates = sorted(eps.get(label, []))
            w.writerow({"label": label, "lr": s.lr, "seeds": s.seeds, "reached": s.reached,
                        "metric": a.target.metric, "target": a.target.value,
                        "time_to_target_median_s": _num(s.time.median), "time_to_target_ci_low_s": _num(s.time.low),
                        "time_to_target_ci_high_s": _num(s.time.high), "ratio_to_bsp": _num(s.ratio_to_bsp),
                        "final_metric_median": _num(s.final.median if s.final else None),
                        "final_metric_ci_low": _num(s.final.low if s.final else None),
                        "final_metric_ci_high": _num(s.final.high if s.final else None),
                        "examples_per_s_median": _num(rates[len(rates) // 2] if rates else None, 1),
                        "wire_bytes_per_example_median": _num(bytes_per_example(a, label), 1)})


def write_seeds_csv(path: Path, a: Analysis) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SEED_FIELDS)
        w.writeheader()
        for o in a.outcomes:
            w.writerow({"label": o.label, "lr": o.lr, "seed": o.seed, "chosen_lr": a.chosen_lr[o.label] == o.lr,
                        "time_to_target_s": _num(o.time_to_target_s), "final_metric": _num(o.final_metric),
                        "train_time_s": _num(o.train_time_s, 3), "examples": o.examples,
                        "examples_per_s": _num(o.examples / o.train_time_s if o.train_time_s > 0 else None, 1),
                        "wire_bytes_per_example": _num(o.wire_bytes_per_example, 1)})


def mode_table(a: Analysis, baseline: str = "bsp") -> str:
    metric = "final accuracy" if a.target.higher_is_better else "final validation loss"
    lines = [f"| mode | lr | seeds | held target | time to target, median [95% CI] | ratio to {baseline} [95% CI] | "
             f"verdict against {baseline} (±{TIE_MARGIN:.0%}) | {metric}, median [95% CI] | wire bytes / example |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = a.stats.get(baseline)
    for label, s in a.stats.items():
        ratio, tie = "—", "—"
        if base is not None and s is not base and s.times and base.times:
            j = s.versus(base)
            ratio, tie = j.ratio.text(2), j.outcome.value + (" (decided by the cap)" if j.decided_by_cap else "")
        elif s.ratio_to_bsp is not None:
            ratio = f"{s.ratio_to_bsp:.2f}"
        final = "—" if s.final is None else s.final.text(4)
        wire = bytes_per_example(a, label)
        lines.append(f"| {label} | {s.lr:g} | {s.seeds} | {s.reached}/{s.seeds} | {s.time.time_text(a.unit)} | "
                     f"{ratio} | {tie} | {final} | {'—' if wire is None else f'{wire:.1f}'} |")
    return "\n".join(lines)


def grid_table(a: Analysis) -> str:
    """Median time to target for every (mode, lr) of the grid; the chosen one in bold."""
    lrs = sorted({o.lr for o in a.outcomes})
    lines = ["| mode | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |", "|---|" + "---|" * len(lrs)]
    for label in a.stats:
        cells = []
        for lr in lrs:
            runs = [o for o in a.outcomes if o.label == label and o.lr == lr]
            if not runs:
                cells.append("—")
                continue
            times = sorted(o.time_to_target_s if o.time_to_target_s is not None else math.inf for o in runs)
            med = times[len(times) // 2] if len(times) % 2 else (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2
            held = sum(o.time_to_target_s is not None for o in runs)
            cell = ("not held" if math.isinf(med) else f"{significant(med)}{a.unit}") + f" ({held}/{len(runs)})"
            cells.append(f"**{cell}**" if a.chosen_lr[label] == lr else cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def resolution_sentence(a: Analysis, baseline: str = "bsp") -> str:
    """How finely the evaluations time the target, against the baseline's median time to it."""
    every = f"Time resolution: evaluations every {significant(a.resolution_s)}{a.unit} (median spacing), "
    if baseline in a.stats and math.isfinite(a.stats[baseline].time.median):
        against = f"{a.resolution_s / a.stats[baseline].time.median:.1%} of {baseline}'s median time to target"
    elif a.baseline_at_least_s:
        against = (f"at most {a.resolution_s / a.baseline_at_least_s:.1%} of {baseline}'s median time to target "
                   f"(not reached: more than the {significant(a.baseline_at_least_s)}{a.unit} its runs lasted)")
    else:
        against = f"{baseline} has no finite median time to compare with"
    if a.resolution_ok:
        return every + against + " (within the 5% limit)."
    return (every + against + " (NOT within 5%: differences smaller than two evaluation periods are not resolved; "
            "lower eval.every_s).")


def caveats(a: Analysis, baseline: str = "bsp") -> list[str]:
    """What limits the conclusion, in the sentences both report.md and the terminal print."""
    out = []
    if sorted({s.seeds for s in a.stats.values()}) == [1]:
        out.append("Only one seed per mode: the intervals are single points, so no difference above is "
                   "statistically supported; run with --seeds 3 or more.")
    if not a.resolution_ok:
        out.append(resolution_sentence(a, baseline))
    base = a.stats.get(baseline)
    capped = [label for label, s in a.stats.items() if base is not None and s is not base and s.times
              and base.times and s.versus(base).decided_by_cap]
    if capped:
        out.append(f"Decided by the cap: {', '.join(capped)} against {baseline}: the verdict rests on seeds that did "
                   "not hold the target, censored at their run's end; a longer budget would size the difference.")
    return out


def report_sections(a: Analysis, setting: list[str], baseline: str = "bsp") -> list[str]:
    """The opening of report.md: the conclusion and its caveats, then the setting it holds for."""
    seeds = sorted({s.seeds for s in a.stats.values()})
    parts = ["## Conclusion", ""] + [f"- {line}" for line in conclusion(a.stats, a.target.text, baseline, a.unit)]
    parts += [f"- {line}" for line in caveats(a, baseline)]
    parts += ["", "## Setting", ""] + [f"- {s}" for s in setting]
    parts += [f"- Seeds: {', '.join(map(str, seeds))} per mode; intervals are {CI_LEVEL:.0%} percentile-bootstrap "
              f"intervals of the median over seeds ({BOOTSTRAP_RESAMPLES:,} resamples, fixed seed). Verdicts rest on the "
              "interval of the ratio of medians: *faster* (*slower*) where it lies wholly below 1 - margin (above "
              f"1 + margin), *tied* where it lies inside 1 ± margin (margin ±{TIE_MARGIN:.0%}), *inconclusive* "
              "otherwise; overlapping intervals confirm nothing. A seed that did not hold the target is censored at "
              "its run's end: it can make its mode slower, never faster or tied, and a verdict resting on it says "
              "*decided by the cap*.",
              f"- Target: {a.target.text}, reached and held: {a.target.rule_text}.",
              "- Learning rates: " + ("each mode at its best rate of the grid (lowest median time to target, "
                                      "then best final metric); the whole grid is below." if a.grid else
                                      "one rate per mode, as configured (see the lr column)."),
              f"- {resolution_sentence(a, baseline)}"]
    return parts
