"""The tuner's rungs and recommendation: a bound stops only when judged slower than
the fastest; bounds that cannot be told apart advance together; the words come
from the verdicts."""
from psgd.bench.outcomes import RunOutcome, mode_stats
from psgd.bench.stats import Rung
from psgd.bench.tune_halving import recommend_bound, run_halving
from psgd.bench.verdict import Outcome


def fake_runner(times, calls=None, lr=0.1):
    def run_arm(bound, offsets):
        if calls is not None:
            calls.append((bound, offsets))
        return [RunOutcome(f"ssp:{bound}", k, lr, times[bound][k], 0.9, 20.0, 100) for k in offsets]
    return run_arm


def test_identical_bounds_advance_together_and_are_called_tied():
    # Lockstep: every bound reaches the target at the same times (issue 38's quickstart case).
    same = [1.8, 1.6, 2.0, 2.2, 2.4]
    times = {4: same, 8: same, 16: same}
    calls = []
    res = run_halving([4, 8, 16], 5, fake_runner(times, calls))
    assert {b: len(v) for b, v in res.outcomes.items()} == {4: 5, 8: 5, 16: 5}
    assert res.stopped_at == {} and res.finalists() == [4, 8, 16]
    assert res.rungs == [Rung(3, 1), Rung(3, 2), Rung(3, 4), Rung(3, 5)]
    bound, why = recommend_bound(res)
    assert bound == 4
    assert why.startswith("every finalist is tied with the fastest (s=4) within ±10%; s=4, the smallest")
    assert "no measurable cost" not in why


def test_a_bound_stops_only_once_judged_slower():
    times = {0: [9.0, 9.5, 10.0, 9.2], 1: [5.0, 5.5, 6.0, 5.2], 2: [5.2, 5.4, 5.9, 5.3], 8: [3.0, 9.0, 6.0, 4.0]}
    calls = []
    res = run_halving([0, 1, 2, 8], 4, fake_runner(times, calls))
    # Rung 0 (one seed each) decides nothing; after two seeds s=0 is slower than the fastest.
    two = {b: mode_stats(fake_runner(times)(b, [0, 1]), "")[f"ssp:{b}"] for b in times}
    fastest = min(two, key=lambda b: two[b].time.median)
    slower = {b for b in two if b != fastest and two[b].versus(two[fastest]).outcome is Outcome.SLOWER}
    assert slower == {0}
    assert calls[:4] == [(0, [0]), (1, [0]), (2, [0]), (8, [0])]
    assert res.stopped_at == {0: 1}
    assert {b: len(v) for b, v in res.outcomes.items()} == {0: 2, 1: 4, 2: 4, 8: 4}


def test_the_recommendation_names_tied_slower_and_undecided_bounds():
    times = {1: [9.0, 9.5, 10.0], 2: [5.0, 5.5, 6.0], 4: [5.2, 5.4, 5.9], 8: [3.0, 9.0, 5.45]}
    res = run_halving([1, 2, 4, 8], 3, fake_runner(times), min_seeds=3)
    stats = {b: mode_stats(res.outcomes[b], "")[f"ssp:{b}"] for b in times}
    fastest = min(stats, key=lambda b: (stats[b].time.median, b))
    assert fastest == 4
    verdicts = {b: stats[b].versus(stats[fastest]).outcome for b in (1, 2, 8)}
    assert verdicts == {1: Outcome.SLOWER, 2: Outcome.TIED, 8: Outcome.INCONCLUSIVE}
    bound, why = recommend_bound(res)
    assert bound == 2
    assert why.startswith("s=2 is the smallest bound tied with the fastest (s=4): tied: ratio")
    assert "; slower than the fastest: s=1 (slower: ratio" in why
    assert "not told apart from the fastest with these seeds (more seeds would decide): s=8 (inconclusive" in why


def test_different_held_counts_are_never_called_tied():
    # s=2 misses the target in one seed: censored, it can be slower, never tied.
    times = {2: [5.0, None, 5.2, 5.1], 8: [5.0, 5.1, 5.2, 5.1]}
    res = run_halving([2, 8], 4, fake_runner(times), min_seeds=4)
    bound, why = recommend_bound(res)
    assert bound == 8
    assert why.startswith("s=8 is the fastest, and no smaller bound is tied with it")
    assert "s=2: 5.15 [5.00, not reached] s, held 3/4" in why
    assert "tied with the fastest (s=8) within" not in why and "no measurable cost" not in why


def test_no_target_held_means_no_recommendation():
    times = {1: [None] * 3, 2: [None] * 3}
    assert recommend_bound(run_halving([1, 2], 3, fake_runner(times)))[0] is None
