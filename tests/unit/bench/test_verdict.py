"""psgd.bench.verdict.judge: the one rule behind every verdict. Each case builds
its seeds, and the expected outcome follows from how they were built."""
import math

import pytest

from psgd.bench.stats import TIE_MARGIN, median_ci, ratio_ci
from psgd.bench.verdict import MIN_DECISIVE_SEEDS, Claimed, ClaimVerdict, Outcome, Sample, claim_verdict, judge

BASE = [10.0, 10.1, 9.9, 10.05, 9.95]   # a tight baseline: its median interval is [9.95, 10.05]


def scaled(k, values=BASE):
    return Sample.of([v * k for v in values])


def test_the_ratio_interval_brackets_the_ratio():
    a = [10.0, 11.0, 12.0, 10.5, 11.5]
    b = [2 * v for v in a]                 # every seed of b takes twice as long
    r = ratio_ci(a, b)
    assert r.median == pytest.approx(0.5)
    assert 10.0 / 24.0 <= r.low < 0.5 < r.high <= 12.0 / 20.0   # unpaired: each side's spread counts
    assert ratio_ci(a, b) == r
    p = ratio_ci(a, b, paired=True)        # paired: the per-seed ratios are all 0.5
    assert (p.low, p.median, p.high) == pytest.approx((0.5, 0.5, 0.5))


def test_a_difference_beyond_the_margin_is_faster_or_slower():
    half, base = scaled(0.5), Sample.of(BASE)
    fast, slow = judge(half, base), judge(base, half)
    assert fast.outcome is Outcome.FASTER and fast.ratio.high < 1 - TIE_MARGIN
    assert slow.outcome is Outcome.SLOWER and slow.ratio.low > 1 + TIE_MARGIN
    assert fast.ratio.median == pytest.approx(0.5) and slow.ratio.median == pytest.approx(2.0)
    assert not fast.decided_by_cap and fast.text().startswith("faster: ratio 0.50")


def test_a_difference_inside_the_margin_is_tied_even_when_it_excludes_1():
    j = judge(scaled(0.95), Sample.of(BASE))
    assert j.ratio.high < 1.0            # the intervals separate: the old rule said "faster"
    assert median_ci([v * 0.95 for v in BASE]).high < median_ci(BASE).low
    assert j.outcome is Outcome.TIED     # but by less than the margin


def test_overlapping_intervals_are_inconclusive_not_a_confirmation():
    wide = [5.0, 10.0, 20.0, 7.0, 14.0]
    a, b = median_ci(wide), median_ci(list(reversed(wide)))
    assert a.low <= b.high and b.low <= a.high   # the intervals overlap
    j = judge(Sample.of(wide), Sample.of(list(reversed(wide))))
    assert j.outcome is Outcome.INCONCLUSIVE
    assert j.ratio.low < 1 - TIE_MARGIN and j.ratio.high > 1 + TIE_MARGIN
    for claimed in Claimed:
        assert claim_verdict(claimed, j.outcome) is ClaimVerdict.INCONCLUSIVE


def test_an_interval_across_an_edge_of_the_margin_is_inconclusive():
    spread = [8.0, 9.5, 8.6, 9.2, 8.9]   # median 0.89 of BASE's, interval straddling 0.9
    j = judge(Sample.of(spread), Sample.of(BASE))
    assert j.ratio.low < 1 - TIE_MARGIN < j.ratio.high
    assert j.outcome is Outcome.INCONCLUSIVE


def test_a_narrower_margin_turns_a_tie_into_a_difference():
    a = scaled(0.93)
    assert judge(a, Sample.of(BASE)).outcome is Outcome.TIED
    assert judge(a, Sample.of(BASE), margin=0.05).outcome is Outcome.FASTER


def test_fewer_than_three_seeds_a_side_are_never_decided():
    assert judge(Sample.of([5.0]), Sample.of(BASE)).outcome is Outcome.INCONCLUSIVE
    assert judge(Sample.of(BASE), Sample.of([20.0])).outcome is Outcome.INCONCLUSIVE
    # Two seeds a side, a 2x difference with no spread: still inconclusive, and it says why.
    two = judge(Sample.of([20.0, 20.2], seeds=[0, 1]), Sample.of([10.0, 10.1], seeds=[0, 1]))
    assert two.outcome is Outcome.INCONCLUSIVE and two.too_few_seeds
    assert two.text().startswith("inconclusive: too few seeds")
    three = judge(Sample.of([20.0, 20.2, 20.1], seeds=[0, 1, 2]), Sample.of([10.0, 10.1, 10.05], seeds=[0, 1, 2]))
    assert three.outcome is Outcome.SLOWER and not three.too_few_seeds and MIN_DECISIVE_SEEDS == 3


def _lognormal(rng, n, cv, scale=1.0):
    sigma = math.sqrt(math.log(1 + cv * cv))
    return [scale * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_null_pairs_are_decided_in_at_most_five_percent_of_trials():
    # Both sides drawn from one log-normal (CV 0.2, the spread of issue #49's figures),
    # judged unpaired and as if paired by seed: any FASTER or SLOWER is a false decision.
    import random
    rng = random.Random(49)
    trials = 150
    for n in range(3, 11):
        for paired in (False, True):
            seeds = list(range(n)) if paired else None
            wrong = sum(judge(Sample.of(_lognormal(rng, n, 0.2), seeds=seeds),
                              Sample.of(_lognormal(rng, n, 0.2), seeds=seeds)).outcome
                        in (Outcome.FASTER, Outcome.SLOWER) for _ in range(trials))
            assert wrong / trials <= 0.05, (n, paired, wrong)


def test_a_quarter_slower_is_found_in_four_of_five_trials_at_five_seeds():
    # a takes 25% longer than b; seed-to-seed spread CV 0.05 (at CV 0.2 five seeds a side cannot
    # resolve 25% against a ±10% margin with any 95% interval).
    import random
    rng = random.Random(25)
    trials = 200
    for paired in (False, True):
        seeds = list(range(5)) if paired else None
        found = sum(judge(Sample.of(_lognormal(rng, 5, 0.05, 1.25), seeds=seeds),
                          Sample.of(_lognormal(rng, 5, 0.05), seeds=seeds)).outcome is Outcome.SLOWER
                    for _ in range(trials))
        assert found / trials >= 0.8, (paired, found)


def test_censored_seeds_can_make_their_mode_slower_and_the_verdict_says_the_cap_decided():
    # a: three of five seeds never held the target by their cap of 30 s (3x the baseline).
    a = Sample.of([25.0, math.inf, 28.0, math.inf, math.inf], caps=[30.0] * 5)
    assert a.values == (25.0, 30.0, 28.0, 30.0, 30.0) and a.n_censored == 3
    j = judge(a, Sample.of(BASE))
    assert j.outcome is Outcome.SLOWER and j.decided_by_cap and j.censored == (3, 0)
    assert "decided by the cap" in j.text() and "3/5" in j.text()
    # The mirror: the baseline censored, a fast: faster, decided by the cap.
    k = judge(Sample.of(BASE), a)
    assert k.outcome is Outcome.FASTER and k.decided_by_cap


def test_censored_seeds_never_make_their_mode_faster_or_tied():
    # Capped below the baseline's times: at their caps they look faster, but the truth is unknown.
    early = Sample.of([4.0, math.inf, 4.5, math.inf, math.inf], caps=[5.0] * 5)
    assert ratio_ci(early.values, BASE).high < 1 - TIE_MARGIN
    assert judge(early, Sample.of(BASE)).outcome is Outcome.INCONCLUSIVE
    near = Sample.of([10.0, math.inf, 9.9, math.inf, math.inf], caps=[10.0] * 5)
    assert judge(near, Sample.of(BASE)).outcome is Outcome.INCONCLUSIVE  # at the caps it would be TIED
    both = judge(Sample.of([math.inf] * 3, caps=[30.0] * 3), Sample.of([math.inf] * 3, caps=[10.0] * 3))
    assert both.outcome is Outcome.INCONCLUSIVE and not both.decided_by_cap


def test_higher_is_better_reads_better_and_worse():
    acc_sa, acc_bsp = [0.93, 0.936, 0.94, 0.935], [0.65, 0.655, 0.66, 0.64]
    j = judge(Sample.of(acc_sa), Sample.of(acc_bsp), higher_is_better=True)
    assert j.outcome is Outcome.FASTER and j.text().startswith("better: ratio 1.4")
    assert judge(Sample.of(acc_bsp), Sample.of(acc_sa), higher_is_better=True).text().startswith("worse")
    assert claim_verdict(Claimed.TIES, j.outcome) is ClaimVerdict.NOT_CONFIRMED


def test_a_claim_is_confirmed_only_by_the_outcome_it_asserts():
    for claimed, wanted in ((Claimed.BEATS, Outcome.FASTER), (Claimed.TIES, Outcome.TIED)):
        for outcome in Outcome:
            v = claim_verdict(claimed, outcome)
            if outcome is wanted:
                assert v is ClaimVerdict.CONFIRMED
            elif outcome is Outcome.INCONCLUSIVE:
                assert v is ClaimVerdict.INCONCLUSIVE
            else:
                assert v is ClaimVerdict.NOT_CONFIRMED


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="margin"):
        judge(Sample.of(BASE), Sample.of(BASE), margin=0.0)
    with pytest.raises(ValueError, match="finite"):
        Sample((math.inf,), (False,))
    with pytest.raises(ValueError, match="censored"):
        judge(Sample.of([0.9, math.inf], caps=[1.0, 1.0]), Sample.of(BASE), higher_is_better=True)


def test_the_same_seeds_are_resampled_together():
    # Two modes in lockstep: every seed takes the same time in both.
    times, seeds = [1.8, 1.6, 2.0, 2.2, 2.4], [0, 1, 2, 3, 4]
    unpaired = judge(Sample.of(times), Sample.of(list(reversed(times))))
    assert unpaired.outcome is Outcome.INCONCLUSIVE and not unpaired.paired   # each side's spread alone
    paired = judge(Sample.of(times, seeds=seeds), Sample.of(list(reversed(times)), seeds=list(reversed(seeds))))
    assert paired.paired and paired.outcome is Outcome.TIED
    assert (paired.ratio.low, paired.ratio.high) == (1.0, 1.0) and "paired by seed" in paired.text()
    # Different seeds: no pairing.
    assert not judge(Sample.of(times, seeds=seeds), Sample.of(times, seeds=[5, 6, 7, 8, 9])).paired
