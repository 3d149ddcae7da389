"""Progress of a live run, folded from the events the launcher merges."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from psgd.core.histogram import Histogram
from psgd.orchestrate.records.metrics_export import eval_updates
from psgd.runtime.event_names import Event

__all__ = ["Progress", "ProgressTracker"]


@dataclass
class Progress:
    steps: int = 0
    total_steps: int = 0
    updates: int = 0
    updates_per_s: float = 0.0
    accuracy: Optional[float] = None
    staleness_mean: Optional[float] = None
    staleness_max: Optional[int] = None
    t: float = 0.0
    started: bool = False   # every process is ready and the training clock runs
    notices: list[str] = field(default_factory=list)  # lines for the user, oldest first (a lost node)


class ProgressTracker:
    """Updates one Progress from each event; shards' staleness histograms are merged."""

    def __init__(self, total_steps: int):
        self.progress = Progress(total_steps=total_steps)
        self._staleness: dict[int, dict] = {}  # shard -> its latest (cumulative) staleness histogram

    def record(self, e: dict) -> Progress:
        p = self.progress
        ev = e.get("event")
        if ev == Event.STEP:
            p.steps += 1
        elif ev == Event.EVAL:
            p.accuracy = e.get("accuracy")
            p.updates = max(p.updates, eval_updates(e))
        elif ev == Event.NODE_LOST and e.get("restarted"):  # one that stops the run says so in its reason
            p.notices.append(e["line"])
        elif ev == Event.SERVER_STATS:
            self._staleness[e.get("index", 0)] = e.get("staleness_hist", {})
            merged = Histogram()
            for hist in self._staleness.values():
                merged.merge(hist)
            p.staleness_mean, p.staleness_max = merged.mean, merged.max
            p.updates = max(p.updates, int(e.get("version", 0)))
        p.t = e.get("t", p.t)
        p.updates_per_s = p.updates / p.t if p.t > 0 else 0.0
        return p
