"""Histograms of small non-negative integers: staleness and clock gaps."""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Optional

__all__ = ["Histogram"]


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

    def quantile(self, q: float) -> Optional[float]:
        """The smallest value with at least a fraction `q` of the counts at or below it
        (nearest rank: a value that was seen); None when empty."""
        total = self.total
        if not total:
            return None
        seen = 0
        for value, n in sorted(self.counts.items()):
            seen += n
            if seen >= q * total:
                return float(value)
        return float(self.max)

    @classmethod
    def of(cls, counts: Mapping) -> "Histogram":
        """A histogram of `counts` as summary.json and events hold them ({"3": 12, ...})."""
        hist = cls()
        hist.merge(counts)
        return hist

    def as_dict(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}
