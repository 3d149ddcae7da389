"""`psgd tune staleness`: time to target accuracy for each SSP bound, and the
bound to use.

The recommendation prefers the bound that reached the target in the most
seeds, then the lowest median time to target; bounds within TIE_FRACTION of
the best time count as tied and the smallest of them wins (less staleness,
same speed). If no bound reached the target, it names the bound with the best
median final accuracy and says so.
"""
from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.bench.convergence import BenchResult, ModeSpec, write_outputs
from psgd.bench.run_data import RunData

__all__ = ["parse_bounds", "bound_specs", "BoundResult", "tabulate", "recommend", "staleness_table",
           "write_tune_outputs", "TIE_FRACTION"]

TIE_FRACTION = 0.05


def parse_bounds(text: str) -> list[int]:
    try:
        bounds = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--bounds: expected comma-separated integers, got {text!r}") from None
    if not bounds or any(b < 0 for b in bounds):
        raise ValueError(f"--bounds: need at least one bound, all >= 0, got {text!r}")
    if len(set(bounds)) != len(bounds):
        raise ValueError("--bounds: a bound is listed twice")
    return bounds


def bound_specs(bounds: list[int]) -> list[ModeSpec]:
    return [ModeSpec(f"ssp:{b}", "ssp", b) for b in bounds]


@dataclass
class BoundResult:
    bound: int
    seeds: int
    reached: int
    median_time_s: float            # inf if the target was reached in fewer than half the seeds
    times: list[Optional[float]]
    median_accuracy: Optional[float]


def tabulate(runs: list[RunData], bounds: list[int]) -> list[BoundResult]:
    out = []
    for b in bounds:
        group = [r for r in runs if r.label == f"ssp:{b}"]
        times = [r.summary.get("time_to_target_s") for r in group]
        vals = [float(t) if t is not None else math.inf for t in times]
        accs = [r.summary["final_test_accuracy"] for r in group if r.summary.get("final_test_accuracy") is not None]
        out.append(BoundResult(b, len(group), sum(t is not None for t in times),
                               statistics.median(vals) if vals else math.inf, times,
                               statistics.median(accs) if accs else None))
    return out


def recommend(rows: list[BoundResult], target: float) -> tuple[Optional[int], str]:
    """(bound, one-line reason)."""
    ran = [r for r in rows if r.seeds]
    if not ran:
        return None, "no run finished, so there is nothing to recommend"
    most = max(r.reached for r in ran)
    if most == 0:
        best = max(ran, key=lambda r: (r.median_accuracy or 0.0, -r.bound))
        return best.bound, (f"no bound reached {target:g}; s={best.bound} has the best median final accuracy "
                            f"({best.median_accuracy:.4f}) — lower the target or train longer")
    cands = [r for r in ran if r.reached == most]
    fastest = min(r.median_time_s for r in cands)
    tied = [r for r in cands if r.median_time_s <= fastest * (1 + TIE_FRACTION)]
    pick = min(tied, key=lambda r: r.bound)
    others = ", ".join(f"s={r.bound} {_t(r.median_time_s)}" for r in ran if r is not pick)
    why = (f"s={pick.bound} reached {target:g} in {pick.reached}/{pick.seeds} seeds with median time "
           f"{_t(pick.median_time_s)}")
    if len(tied) > 1:
        why += f" (within {TIE_FRACTION:.0%} of the fastest; the smallest such bound keeps staleness lowest)"
    return pick.bound, why + (f"; others: {others}" if others else "")


def _t(v: float) -> str:
    return "not reached" if math.isinf(v) else f"{v:.2f}s"


def staleness_table(rows: list[BoundResult], target: float) -> str:
    lines = [f"| bound s | seeds | reached {target:g} | median time to target (s) | times per seed (s) | "
             "median final accuracy |", "|---|---|---|---|---|---|"]
    for r in rows:
        per_seed = ", ".join("n.r." if t is None else f"{t:.2f}" for t in r.times)
        acc = "—" if r.median_accuracy is None else f"{r.median_accuracy:.4f}"
        lines.append(f"| {r.bound} | {r.seeds} | {r.reached}/{r.seeds} | {_t(r.median_time_s).rstrip('s')} | "
                     f"{per_seed} | {acc} |")
    return "\n".join(lines)


def write_tune_outputs(result: BenchResult, bounds: list[int], target: float, config_text: str,
                       command: str) -> tuple[str, Optional[int], str, Path]:
    """Writes tune.md and tune.csv (plus the bench report, CSV and plots) into
    result.out_dir; returns (table, recommended bound, reason, tune.md path)."""
    rows = tabulate(result.runs, bounds)
    bound, why = recommend(rows, target)
    table = staleness_table(rows, target)
    write_outputs(result, f"SSP staleness bounds, target {target:g}", config_text, command)
    out = result.out_dir
    with open(out / "tune.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bound", "seeds", "reached", "median_time_to_target_s", "median_final_accuracy"])
        for r in rows:
            w.writerow([r.bound, r.seeds, r.reached, None if math.isinf(r.median_time_s) else r.median_time_s,
                        r.median_accuracy])
    line = f"recommended bound: {bound} — {why}" if bound is not None else f"no recommendation: {why}"
    text = [f"# Staleness tuning, target accuracy {target:g}", "", f"Command: `{command}`", "", table, "", line, ""]
    if result.failed:
        text += ["Failed runs:", ""] + [f"- {f}" for f in result.failed] + [""]
    text += ["Per-mode details and plots: [report.md](report.md).", ""]
    md = out / "tune.md"
    md.write_text("\n".join(text))
    return table, bound, line, md
