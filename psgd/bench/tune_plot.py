"""The tuner's chart: held time to target by SSP bound, each bound's median
over its seeds with its 95% interval, every seed as a dot, seeds that did not
hold the target as a triangle at the top, and bounds that never bound named
as such (their runs are the same run)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from psgd.bench.outcomes import RunOutcome
from psgd.bench.pyplot import pyplot
from psgd.bench.stats import median_ci

__all__ = ["BY_BOUND_PLOT", "plot_by_bound"]

BY_BOUND_PLOT = "time_to_target_by_bound.png"


def plot_by_bound(outcomes: dict[int, list[RunOutcome]], path: Path, title: str, unit: str,
                  never_binding: Sequence[int] = ()) -> Path:
    """`outcomes`: each bound's seeds; `unit`: "simulated s" or "s"."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    bounds = [b for b in sorted(outcomes) if outcomes[b]]
    held = [o.time_to_target_s for b in bounds for o in outcomes[b] if o.time_to_target_s is not None]
    top = 1.08 * max(held) if held else 1.0
    for i, b in enumerate(bounds):
        times = [o.time_to_target_s for o in outcomes[b]]
        iv = median_ci([t if t is not None else math.inf for t in times])
        ax.scatter([i] * sum(t is not None for t in times), [t for t in times if t is not None], s=14,
                   color="tab:gray", alpha=0.6, zorder=2, label="one seed" if i == 0 else None)
        missed = sum(t is None for t in times)
        if missed:
            ax.scatter([i], [top], marker="^", color="tab:red", zorder=3,
                       label="seeds that did not hold the target" if not any(
                           o.time_to_target_s is None for c in bounds[:i] for o in outcomes[c]) else None)
            ax.annotate(f"{missed} not held", (i, top), textcoords="offset points", xytext=(6, -3), fontsize=7)
        if math.isfinite(iv.median):
            high = iv.high if math.isfinite(iv.high) else top
            ax.errorbar([i], [iv.median], yerr=[[iv.median - iv.low], [high - iv.median]], fmt="o", color="tab:blue",
                        capsize=5, zorder=4, label="median, 95% interval" if i == 0 else None)
    ax.set_xticks(range(len(bounds)))
    ax.set_xticklabels([f"s={b}" + ("\n(never binds)" if b in never_binding else "") for b in bounds])
    ax.set_xlabel("SSP bound (clocks)")
    ax.set_ylabel(f"time to hold the target ({unit})")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
