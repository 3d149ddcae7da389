"""PNG plots of one or more runs, one colour per mode: the median over seeds
with a band from the lowest to the highest seed, for the target metric vs wall
time and vs training examples processed (the same unit in every mode: a BSP
update averages W workers' batches, an ASP update applies one), training loss
vs wall time, and staleness histograms. Every seed's curve stops where its
run stopped, marked with an x on its curve's last point, so one can see who
finished first. Modes whose runs are identical are drawn dashed over each
other and named as identical, so neither hides the other. Runs on the
virtual cluster are plotted against simulated time, and say so. Uses
matplotlib's Agg backend (the `bench` extra, imported when plotting), so no
display is needed."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

import numpy as np

from psgd.bench.bound_plot import BOUND_PLOT, has_setting_changes, plot_bounds
from psgd.bench.pyplot import pyplot
from psgd.bench.run_data import RunData, group_by_label

__all__ = ["plot_runs", "PLOT_FILES", "curve_on_grid", "identical_to"]

PLOT_FILES = {
    "metric_vs_time": "metric_vs_time.png",
    "metric_vs_examples": "metric_vs_examples.png",
    "loss_vs_time": "loss_vs_time.png",
    "staleness_hist": "staleness_hist.png",
}
GRID_POINTS = 300
LOSS_BINS = 40
TITLE_WIDTH = 70


def curve_on_grid(xs: list[float], ys: list[float], grid: np.ndarray) -> np.ndarray:
    """The latest y at or before each grid point; NaN before the first point
    and after the last one (the run had ended: nothing is drawn there)."""
    out = np.full(len(grid), np.nan)
    if not xs:
        return out
    idx = np.searchsorted(np.asarray(xs), grid, side="right") - 1
    inside = (idx >= 0) & (grid <= xs[-1])
    out[inside] = np.asarray(ys, dtype=float)[idx[inside]]
    return out


def _binned_mean(xs: list[float], ys: list[float], edges: np.ndarray) -> np.ndarray:
    out = np.full(len(edges) - 1, np.nan)
    if not xs:
        return out
    x, y = np.asarray(xs), np.asarray(ys)
    which = np.digitize(x, edges) - 1
    for b in range(len(edges) - 1):
        sel = which == b
        if sel.any():
            out[b] = y[sel].mean()
    return out


def _band(ax, grid, rows: np.ndarray, label: str, ends=(), same_as: Optional[str] = None, dashes=None) -> None:
    """Median over the seeds still running at each point, min-max band, and an
    x where each seed's run ended; `same_as`: the mode whose runs these repeat
    (drawn dashed, so both lines show)."""
    valid = ~np.all(np.isnan(rows), axis=0)
    if not valid.any():
        return
    g, r = grid[valid], rows[:, valid]
    n = len(rows)
    name = f"{label} (n={n})" + (f", identical to {same_as}" if same_as else "")
    (line,) = ax.plot(g, np.nanmedian(r, axis=0), label=name, linewidth=1.6)
    if dashes:
        line.set_dashes(dashes)
    if n > 1:
        ax.fill_between(g, np.nanmin(r, axis=0), np.nanmax(r, axis=0), color=line.get_color(), alpha=0.15,
                        linewidth=0)
    for x, y in ends:
        ax.plot([x], [y], marker="x", color=line.get_color(), markersize=6, linestyle="none")


def _title(text: str) -> str:
    return textwrap.fill(text, TITLE_WIDTH)


def _finish(fig, ax, x_label, y_label, title, path) -> None:
    plt = pyplot()
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(_title(title), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.plot([], [], marker="x", color="grey", linestyle="none", label="run ended")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def identical_to(series: dict[str, list]) -> dict[str, str]:
    """label -> the earlier label whose every seed's series it repeats exactly."""
    first: dict[str, str] = {}
    out = {}
    for label, ss in series.items():
        key = repr([(list(xs), list(ys)) for xs, ys in ss])
        if key in first:
            out[label] = first[key]
        else:
            first[key] = label
    return out


def _dashes(k: int) -> tuple[float, float]:
    """The k-th repeat of a curve: dashes of a growing gap, so the lines under it show through."""
    return (3.0, 2.0 + 2.0 * k)


def _series_plot(groups, x_of, metric_label, x_label, title, path, target=None) -> None:
    fig, ax = pyplot().subplots(figsize=(7.5, 4.8))
    series = {label: [x_of(r) for r in runs] for label, runs in groups.items()}
    x_max = max((xs[-1] for ss in series.values() for xs, _ in ss if xs), default=1.0) or 1.0
    # Every run's end is a grid point, so each curve reaches the x that marks its end.
    grid = np.union1d(np.linspace(0.0, x_max, GRID_POINTS), [xs[-1] for ss in series.values() for xs, _ in ss if xs])
    same = identical_to(series)
    repeats: dict[str, int] = {}
    for label, ss in series.items():
        rows = np.vstack([curve_on_grid(xs, ys, grid) for xs, ys in ss])
        dashes = None
        if label in same:
            repeats[same[label]] = repeats.get(same[label], 0) + 1
            dashes = _dashes(repeats[same[label]])
        _band(ax, grid, rows, label, [(xs[-1], ys[-1]) for xs, ys in ss if xs], same.get(label), dashes)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target:g}")
    _finish(fig, ax, x_label, metric_label, title, path)


def _loss_plot(groups, title, path, x_label) -> None:
    fig, ax = pyplot().subplots(figsize=(7.5, 4.8))
    t_max = max((r.loss_series()[0][-1] for runs in groups.values() for r in runs if r.steps), default=1.0)
    edges = np.linspace(0.0, t_max, LOSS_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    same = identical_to({label: [r.loss_series() for r in runs] for label, runs in groups.items()})
    repeats: dict[str, int] = {}
    for label, runs in groups.items():
        rows, ends = [], []
        for r in runs:
            ts, ls = r.loss_series()
            row = _binned_mean(ts, ls, edges)
            if ts:
                row[centres > ts[-1]] = np.nan
                last = row[~np.isnan(row)]
                if len(last):
                    ends.append((centres[~np.isnan(row)][-1], last[-1]))
            rows.append(row)
        dashes = None
        if label in same:
            repeats[same[label]] = repeats.get(same[label], 0) + 1
            dashes = _dashes(repeats[same[label]])
        _band(ax, centres, np.vstack(rows), label, ends, same.get(label), dashes)
    _finish(fig, ax, x_label, "training loss (mean over workers' steps)", title, path)


def _staleness_plot(groups, title, path) -> None:
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator
    n = len(groups)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows + 0.6), squeeze=False, sharey=True)
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
    fig.suptitle(_title(title), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _simulated(runs: list[RunData]) -> bool:
    return bool(runs) and all((r.config.get("cluster") or {}).get("launcher") == "sim" for r in runs)


def plot_runs(runs: list[RunData], out_dir: Path, title: str = "", target: Optional[float] = None,
              metric: str = "accuracy") -> list[Path]:
    """Write the four plots for `runs` into out_dir; returns their paths."""
    clock = "simulated time" if _simulated(runs) else "wall time"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = group_by_label(runs)
    prefix = f"{title}: " if title else ""
    paths = {k: out_dir / v for k, v in PLOT_FILES.items()}
    name = "test accuracy" if metric == "accuracy" else "validation loss"

    def by_time(r):
        t, _, v = r.metric_series(metric)
        return t, v

    def by_examples(r):
        _, ex, v = r.metric_series(metric)
        order = np.argsort(ex, kind="stable")
        return [ex[i] for i in order], [v[i] for i in order]

    _series_plot(groups, by_time, name, f"{clock} since start (s)", prefix + f"{name} vs {clock}",
                 paths["metric_vs_time"], target)
    _series_plot(groups, by_examples, name, "training examples behind the applied updates",
                 prefix + f"{name} vs examples processed", paths["metric_vs_examples"], target)
    _loss_plot(groups, prefix + f"training loss vs {clock}", paths["loss_vs_time"], f"{clock} since start (s)")
    _staleness_plot(groups, prefix + "staleness of applied gradients", paths["staleness_hist"])
    # Runs whose bound changed while they ran (staleness: auto, psgd ctl): the bound in force over time.
    changed = [r for r in runs if has_setting_changes(r.run_dir)][:6]
    if changed:
        panels = [(f"{r.label} seed {r.seed}", r.run_dir, None) for r in changed]
        paths["bound_vs_time"] = plot_bounds(panels, out_dir / BOUND_PLOT, prefix + "SSP bound in force")
    return list(paths.values())
