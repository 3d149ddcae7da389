"""PNG plots of one or more runs, one line per mode (median over seeds, with
the min-max band): test accuracy vs wall time, test accuracy vs updates,
training loss vs wall time, and staleness histograms. Uses matplotlib's Agg
backend, so no display is needed."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from psgd.bench.bound_plot import BOUND_PLOT, has_setting_changes, plot_bounds  # noqa: E402
from psgd.bench.run_data import RunData, group_by_label  # noqa: E402

__all__ = ["plot_runs", "PLOT_FILES"]

PLOT_FILES = {
    "accuracy_vs_time": "accuracy_vs_time.png",
    "accuracy_vs_updates": "accuracy_vs_updates.png",
    "loss_vs_time": "loss_vs_time.png",
    "staleness_hist": "staleness_hist.png",
}
GRID_POINTS = 200
LOSS_BINS = 40


def _step_values(xs: list[float], ys: list[float], grid: np.ndarray) -> np.ndarray:
    """The latest y at or before each grid point (NaN before the first)."""
    if not xs:
        return np.full(len(grid), np.nan)
    idx = np.searchsorted(np.asarray(xs), grid, side="right") - 1
    out = np.asarray(ys, dtype=float)[np.clip(idx, 0, None)]
    out[idx < 0] = np.nan
    return out


def _binned_mean(xs: list[float], ys: list[float], edges: np.ndarray) -> np.ndarray:
    if not xs:
        return np.full(len(edges) - 1, np.nan)
    x, y = np.asarray(xs), np.asarray(ys)
    which = np.digitize(x, edges) - 1
    out = np.full(len(edges) - 1, np.nan)
    for b in range(len(edges) - 1):
        sel = which == b
        if sel.any():
            out[b] = y[sel].mean()
    return out


def _band(ax, grid, rows: np.ndarray, label: str) -> None:
    """Median line and min-max band over seeds (columns where every seed is NaN are skipped)."""
    valid = ~np.all(np.isnan(rows), axis=0)
    if not valid.any():
        return
    g, r = grid[valid], rows[:, valid]
    (line,) = ax.plot(g, np.nanmedian(r, axis=0), label=label, linewidth=1.6)
    if len(rows) > 1:
        ax.fill_between(g, np.nanmin(r, axis=0), np.nanmax(r, axis=0), color=line.get_color(), alpha=0.15)


def _series_plot(groups, x_of, y_label, x_label, title, path, target=None, x_max=None) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if x_max is None:
        x_max = max((max(x_of(r)[0], default=0.0) for runs in groups.values() for r in runs), default=0.0)
    grid = np.linspace(0.0, x_max or 1.0, GRID_POINTS)
    for label, runs in groups.items():
        rows = np.vstack([_step_values(*x_of(r), grid) for r in runs])
        _band(ax, grid, rows, label)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    _finish(fig, ax, x_label, y_label, title, path)


def _finish(fig, ax, x_label, y_label, title, path) -> None:
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _loss_plot(groups, title, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    t_max = max((r.loss_series()[0][-1] for runs in groups.values() for r in runs if r.steps), default=1.0)
    edges = np.linspace(0.0, t_max, LOSS_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    for label, runs in groups.items():
        rows = np.vstack([_binned_mean(*r.loss_series(), edges) for r in runs])
        _band(ax, centres, rows, label)
    _finish(fig, ax, "wall time since start (s)", "training loss (mean over workers' steps)", title, path)


def _staleness_plot(groups, title, path) -> None:
    n = len(groups)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, (label, runs) in zip(axes.flat, groups.items()):
        hist: dict[int, int] = {}
        for r in runs:
            for k, v in (r.summary.get("staleness_hist") or {}).items():
                hist[int(k)] = hist.get(int(k), 0) + int(v)
        total = sum(hist.values())
        if total:
            ks = sorted(hist)
            ax.bar(ks, [hist[k] / total for k in ks], width=0.8)
            ax.set_xlim(-0.6, max(ks[-1], 1) + 0.6)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("staleness τ (updates)")
        ax.set_ylabel("fraction of gradients")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_runs(runs: list[RunData], out_dir: Path, title: str = "", target: Optional[float] = None) -> list[Path]:
    """Write the four plots for `runs` into out_dir; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_by_label(runs)
    prefix = f"{title}: " if title else ""
    paths = {k: out_dir / v for k, v in PLOT_FILES.items()}

    def by_time(r):
        t, _, acc = r.accuracy_series()
        return t, acc

    def by_updates(r):
        _, ups, acc = r.accuracy_series()
        order = np.argsort(ups, kind="stable")
        return [ups[i] for i in order], [acc[i] for i in order]

    # The final evaluation comes after the processes have stopped; the time
    # axis ends with training (plus one evaluation period) so it stays readable.
    last_step = max((r.steps[-1]["t"] for r in runs if r.steps), default=None)
    t_max = last_step * 1.05 if last_step else None
    _series_plot(groups, by_time, "test accuracy", "wall time since start (s)",
                 prefix + "test accuracy vs wall time", paths["accuracy_vs_time"], target, t_max)
    _series_plot(groups, by_updates, "test accuracy", "model updates",
                 prefix + "test accuracy vs updates", paths["accuracy_vs_updates"], target)
    _loss_plot(groups, prefix + "training loss vs wall time", paths["loss_vs_time"])
    _staleness_plot(groups, prefix + "staleness of applied gradients", paths["staleness_hist"])
    # Runs whose bound changed while they ran (staleness: auto, psgd ctl): the bound in force over time.
    changed = [r for r in runs if has_setting_changes(r.run_dir)][:6]
    if changed:
        panels = [(f"{r.label} seed {r.seed}", r.run_dir, None) for r in changed]
        paths["bound_vs_time"] = plot_bounds(panels, out_dir / BOUND_PLOT, prefix + "SSP bound in force")
    return list(paths.values())
