"""Histogram quantiles: nearest rank over the counts, a value that was seen."""
from psgd.core.histogram import Histogram


def test_quantiles_are_nearest_rank_over_the_counts():
    hist = Histogram.of({"0": 5, "3": 4, "7": 1})
    assert hist.quantile(0.5) == 0.0   # 5 of 10 at or below 0
    assert hist.quantile(0.51) == 3.0
    assert hist.quantile(0.9) == 3.0 and hist.quantile(0.99) == 7.0 and hist.quantile(1.0) == 7.0
    assert Histogram().quantile(0.5) is None
