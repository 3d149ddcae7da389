"""A tie is a claim about a ratio: confirmed only when the ratio's interval lies inside the margin."""
import math

import pytest

from psgd.bench.stats import TIE_MARGIN, Interval, Tie, judge_tie, ratio_ci


def test_the_ratio_interval_brackets_the_ratio_of_medians():
    a, b = [10.0, 11.0, 12.0, 10.5, 11.5], [20.0, 22.0, 24.0, 21.0, 23.0]
    r = ratio_ci(a, b)
    assert r.median == pytest.approx(11.0 / 22.0)
    assert 10.0 / 24.0 <= r.low <= r.median <= r.high <= 12.0 / 20.0
    assert ratio_ci(a, b) == r  # seeded: the same sample, the same interval


def test_close_tight_medians_tie_and_far_ones_do_not():
    base = [10.0, 10.1, 9.9, 10.05, 9.95]
    assert judge_tie(ratio_ci([v * 1.02 for v in base], base)) is Tie.TIED
    assert judge_tie(ratio_ci([v * 1.5 for v in base], base)) is Tie.NOT_TIED


def test_overlapping_but_wide_intervals_are_inconclusive_not_a_tie():
    # Medians equal, but the spread leaves the ratio anywhere from ~0.5 to ~2.
    wide = [5.0, 10.0, 20.0, 7.0, 14.0]
    assert judge_tie(ratio_ci(wide, list(reversed(wide)))) is Tie.INCONCLUSIVE


def test_the_margin_is_the_stated_one_at_its_edges():
    assert TIE_MARGIN == 0.10
    assert judge_tie(Interval(1.0, 0.9, 1.1, 5)) is Tie.TIED
    assert judge_tie(Interval(1.0, 0.89, 1.1, 5)) is Tie.INCONCLUSIVE
    assert judge_tie(Interval(1.0, 0.95, 1.05, 5), margin=0.04) is Tie.INCONCLUSIVE
    assert judge_tie(Interval(1.0, 1.0, 1.0, 1)) is Tie.INCONCLUSIVE  # one seed is no interval


def test_never_reached_is_never_a_tie():
    r = ratio_ci([math.inf] * 3, [math.inf] * 3)
    assert math.isinf(r.median) and judge_tie(r) is not Tie.TIED
