"""Metric events: one JSON object per line, each with `t` and `role`.

Every process writes its own events file; the launcher merges them into the
run's metrics.jsonl. `t` is seconds since training start (the moment every
process was ready), so all processes and all modes share one clock.
"""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Optional

__all__ = ["EventLog", "Histogram"]


class EventLog:
    """Appends events to a JSONL file (or nowhere, if path is None). Thread-safe
    enough for one writer thread; each event is one line-buffered write."""

    def __init__(self, path: Optional[Path], role: str, index: int):
        self.role = role
        self.index = index
        self.t0: Optional[float] = None
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", buffering=1)

    def now(self) -> float:
        return time.time() - self.t0 if self.t0 is not None else 0.0

    def emit(self, event: str, **fields) -> None:
        if self._file is None:
            return
        rec = {"t": round(self.now(), 4), "role": self.role, "index": self.index, "event": event, **fields}
        self._file.write(json.dumps(rec, default=_jsonable) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _jsonable(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class Histogram:
    """Counts of small non-negative integers (staleness, clock gaps)."""

    def __init__(self):
        self.counts: Counter[int] = Counter()

    def add(self, value: int, n: int = 1) -> None:
        self.counts[int(value)] += n

    def merge(self, other: dict) -> None:
        for k, v in other.items():
            self.counts[int(k)] += int(v)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def max(self) -> int:
        return max(self.counts) if self.counts else 0

    @property
    def mean(self) -> float:
        n = self.total
        return sum(k * v for k, v in self.counts.items()) / n if n else 0.0

    def as_dict(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}
