"""Histograms of small non-negative integers: staleness and clock gaps."""
from __future__ import annotations

from collections import Counter

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

    def as_dict(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}
