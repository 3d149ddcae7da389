"""Reading finished run directories back: summary, config and the metric
series that the convergence report and plots need."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from psgd.runtime.events import read_events

__all__ = ["RunData", "load_run", "mode_label", "group_by_label"]


def mode_label(mode: str, staleness: Optional[int], staleness_aware: bool) -> str:
    """The name a mode has on the bench command line: allreduce, bsp, ssp:2, asp, asp+sa."""
    label = f"ssp:{staleness}" if mode == "ssp" else mode
    return label + "+sa" if staleness_aware and mode != "allreduce" else label


@dataclass
class RunData:
    run_dir: Path
    label: str
    summary: dict
    evals: list[dict] = field(default_factory=list)   # eval events, by time
    steps: list[dict] = field(default_factory=list)   # worker step events, by time

    @property
    def seed(self) -> Optional[int]:
        return self.summary.get("seed")

    def accuracy_series(self) -> tuple[list[float], list[float], list[float]]:
        """(t, updates, accuracy) of every evaluation. `updates` counts model
        updates (the mean over shards of their versions), comparable across modes."""
        ts, ups, accs = [], [], []
        for e in self.evals:
            if e.get("accuracy") is None:
                continue
            versions = e.get("versions") or [e.get("updates", 0)]
            ts.append(float(e["t"]))
            ups.append(sum(versions) / len(versions))
            accs.append(float(e["accuracy"]))
        return ts, ups, accs

    def loss_series(self) -> tuple[list[float], list[float]]:
        pairs = [(float(e["t"]), float(e["loss"])) for e in self.steps if e.get("loss") is not None]
        return [p[0] for p in pairs], [p[1] for p in pairs]


def load_run(run_dir: Path) -> RunData:
    """Raises FileNotFoundError naming the missing file if run_dir is not a finished run."""
    run_dir = Path(run_dir)
    for name in ("summary.json", "metrics.jsonl", "config.yaml"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir} is not a psgd run directory: no {name}")
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    aware = bool(cfg.get("optimizer", {}).get("staleness_aware", False))
    label = mode_label(summary["mode"], summary.get("staleness"), aware)
    events = read_events(run_dir / "metrics.jsonl")
    evals = [e for e in events if e.get("event") == "eval"]
    steps = [e for e in events if e.get("event") == "step"]
    evals.sort(key=lambda e: e["t"])
    steps.sort(key=lambda e: e["t"])
    return RunData(run_dir, label, summary, evals, steps)


def group_by_label(runs: list[RunData]) -> dict[str, list[RunData]]:
    """Runs grouped by mode label, in order of first appearance."""
    groups: dict[str, list[RunData]] = {}
    for r in runs:
        groups.setdefault(r.label, []).append(r)
    return groups
