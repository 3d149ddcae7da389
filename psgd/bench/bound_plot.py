"""The SSP bound in force over a run, beside the clock gaps the workers saw.

Reads `setting_change` events (the adaptive bound's decisions and `psgd ctl`
changes) and worker `step` events from a run's metrics.jsonl. One panel per
run: the bound as a step line over training time (drawn from the time the
slowest worker reached the change's effective clock), and each step's clock
gap as dots, which must stay on or under the line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from psgd.bench.pyplot import pyplot
from psgd.config.modes import Mode
from psgd.runtime.event_names import Event
from psgd.runtime.events import read_events

__all__ = ["bound_series", "has_setting_changes", "initial_bound", "plot_bounds", "BOUND_PLOT"]

BOUND_PLOT = "bound_vs_time.png"


def _events(run_dir: Path) -> list[dict]:
    return read_events(Path(run_dir) / "metrics.jsonl")


def _config(run_dir: Path) -> dict:
    path = Path(run_dir) / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def initial_bound(run_dir: Path) -> Optional[int]:
    """The bound a run started with (staleness_min for auto; None unless ssp)."""
    if not (Path(run_dir) / "config.yaml").is_file():
        return None
    c = _config(run_dir).get("consistency", {})
    if Mode(c.get("mode", Mode.ASP.value)) is not Mode.SSP:
        return None
    return c.get("staleness_min", 0) if c.get("staleness") == "auto" else c.get("staleness", 0)


def has_setting_changes(run_dir: Path) -> bool:
    return any(e.get("event") == Event.SETTING_CHANGE for e in _events(run_dir))


def bound_series(events: list[dict], initial: Optional[int] = None, shard: int = 0):
    """((t, bound) points of the bound in force, (t, gap) of every worker step).

    A change is drawn from the first step at or beyond its effective clock (when
    it first governs a pull); None marks asp (no bound)."""
    steps = sorted((e for e in events if e.get("event") == Event.STEP), key=lambda e: e["t"])
    changes = sorted((e for e in events if e.get("event") == Event.SETTING_CHANGE and e.get("index") == shard),
                     key=lambda e: e["effective_clock"])
    points = [(0.0, initial)] if initial is not None else []
    for c in changes:
        s = c["setting"]
        bound = s["bound"] if Mode(s.get("mode", Mode.SSP.value)) is Mode.SSP else None
        when = next((e["t"] for e in steps if e["clock"] >= c["effective_clock"]), None)
        if when is not None:
            points.append((float(when), bound))
    gaps = [(float(e["t"]), int(e["gap"])) for e in steps if e.get("gap") is not None]
    return points, gaps


def plot_bounds(runs: list[tuple[str, Path, Optional[int]]], path: Path, title: str = "") -> Path:
    """`runs`: (label, run directory, initial bound or None to read it from the run's
    config.yaml); one panel each."""
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 2.4 * len(runs) + 0.6), squeeze=False, sharex=True)
    for ax, (label, run_dir, initial) in zip(axes[:, 0], runs):
        points, gaps = bound_series(_events(run_dir), initial if initial is not None else initial_bound(run_dir))
        if gaps:
            ax.scatter([t for t, _ in gaps], [g for _, g in gaps], s=3, alpha=0.35, color="tab:gray",
                       label="clock gap at each step")
        drawn = [(t, b) for t, b in points if b is not None]
        if drawn:
            end = max([t for t, _ in gaps] + [t for t, _ in drawn])
            xs = [t for t, _ in drawn] + [end]
            ys = [b for _, b in drawn] + [drawn[-1][1]]
            ax.step(xs, ys, where="post", color="tab:red", linewidth=1.6, label="bound in force")
        ax.set_ylabel("clocks")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    simulated = all((_config(d).get("cluster") or {}).get("launcher") == "sim" for _, d, _ in runs)
    axes[-1, 0].set_xlabel(f"{'simulated ' if simulated else ''}training time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
