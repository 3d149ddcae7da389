"""Exact expectations for the convergence statistics."""
import math
from math import comb

import pytest

from psgd.bench.stats import Interval, Rung, halving_schedule, median_ci, schedule_runs


def exact_bootstrap_cdf(n: int) -> list[float]:
    """P(median of a size-n resample <= the k-th smallest of n distinct values), n odd."""
    need = (n + 1) // 2
    return [sum(comb(n, j) * (k / n) ** j * (1 - k / n) ** (n - j) for j in range(need, n + 1))
            for k in range(1, n + 1)]


def test_three_seeds_interval_is_min_to_max():
    # A resample's median is the smallest value with probability 7/27 > 2.5%, so
    # with three seeds the 95% interval spans all of them.
    iv = median_ci([4.0, 1.0, 2.5])
    assert (iv.median, iv.low, iv.high, iv.n) == (2.5, 1.0, 4.0, 3)


@pytest.mark.parametrize("n,low_rank,high_rank", [(7, 2, 6), (11, 3, 9)])
def test_interval_matches_exact_bootstrap_distribution(n, low_rank, high_rank):
    cdf = exact_bootstrap_cdf(n)
    # The expected ranks sit well away from the 2.5%/97.5% cut-offs, so 10,000
    # resamples cannot land on the other side (Monte Carlo s.d. ~0.0016).
    assert cdf[low_rank - 2] < 0.02 and cdf[low_rank - 1] > 0.03
    assert cdf[high_rank - 2] < 0.97 and cdf[high_rank - 1] > 0.98
    values = [10.0 * k for k in range(n, 0, -1)]  # order must not matter
    iv = median_ci(values)
    assert iv.median == 10.0 * (n + 1) // 2
    assert (iv.low, iv.high) == (10.0 * low_rank, 10.0 * high_rank)


def test_interval_is_deterministic_per_seed():
    sample = [3.1, 2.7, 5.0, 4.4, 3.9, 2.2, 6.1, 3.3]
    assert median_ci(sample) == median_ci(sample)
    assert median_ci(sample, seed=7) == median_ci(sample, seed=7)


def test_single_value_and_constant_sample():
    assert median_ci([3.0]) == Interval(3.0, 3.0, 3.0, 1)
    assert median_ci([2.0, 2.0, 2.0, 2.0]) == Interval(2.0, 2.0, 2.0, 4)


def test_not_reached_counts_as_infinity_without_nan():
    iv = median_ci([1.0, math.inf, math.inf])
    assert (iv.median, iv.low, iv.high) == (math.inf, 1.0, math.inf)
    even = median_ci([1.0, 2.0, math.inf, math.inf])
    assert even.median == math.inf and even.low == 1.0 and even.high == math.inf


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="no values"):
        median_ci([])
    with pytest.raises(ValueError, match="NaN"):
        median_ci([1.0, float("nan")])


def test_halving_schedule():
    assert halving_schedule(5, max_seeds=3) == [Rung(5, 1), Rung(3, 2), Rung(2, 3)]
    assert halving_schedule(8, max_seeds=4) == [Rung(8, 1), Rung(4, 2), Rung(2, 4)]
    assert halving_schedule(8, max_seeds=8, eta=3) == [Rung(8, 1), Rung(3, 3), Rung(2, 8)]
    assert halving_schedule(2, max_seeds=3, min_seeds=3) == [Rung(2, 3)]
    assert halving_schedule(1, max_seeds=3) == [Rung(1, 1), Rung(1, 2), Rung(1, 3)]
    # 5 bounds x 3 seeds would be 15 runs; halving costs 5 + 3 + 2
    assert schedule_runs(halving_schedule(5, max_seeds=3)) == 10
    assert schedule_runs(halving_schedule(8, max_seeds=4)) == 8 + 4 + 2 * 2
    with pytest.raises(ValueError):
        halving_schedule(0, 3)
    with pytest.raises(ValueError):
        halving_schedule(3, 2, min_seeds=3)
