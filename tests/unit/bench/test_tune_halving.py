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
    assert why.startswith("every finalist is tied with s=4 (the lowest median) within ±10%; s=4, the smallest")
    assert "fastest" not in why
    assert "no measurable cost" not in why


def test_a_bound_stops_only_once_judged_slower():
    times = {0: [9.0, 9.5, 10.0, 9.2, 9.4, 9.1, 9.3], 1: [5.0, 5.5, 6.0, 5.2, 5.3, 5.1, 5.4],
             2: [5.2, 5.4, 5.9, 5.3, 5.5, 5.0, 5.6], 8: [5.1, 5.3, 5.8, 5.0, 5.2, 5.4, 5.5]}
    calls = []
    res = run_halving([0, 1, 2, 8], 7, fake_runner(times, calls), min_seeds=2, eta=2)
    # Rung 0 (two seeds each) decides nothing, however far apart: a verdict needs three seeds a side.
    # After four, s=0 is slower than the lowest median, and stops there.
    assert res.rungs[0] == Rung(4, 2) and res.rungs[1] == Rung(4, 4)
    four = {b: mode_stats(fake_runner(times)(b, [0, 1, 2, 3]), "")[f"ssp:{b}"] for b in times}
    low = min(four, key=lambda b: four[b].time.median)
    slower = {b for b in four if b != low and four[b].versus(four[low]).outcome is Outcome.SLOWER}
    assert slower == {0}
    assert calls[:4] == [(0, [0, 1]), (1, [0, 1]), (2, [0, 1]), (8, [0, 1])]
    assert res.stopped_at == {0: 1}
    assert {b: len(v) for b, v in res.outcomes.items()} == {0: 4, 1: 7, 2: 7, 8: 7}


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
    assert why.startswith("s=2 is the smallest bound tied with s=4 (the lowest median): tied: ratio")
    assert "; slower than s=4: s=1 (slower: ratio" in why
    assert "not told apart from s=4 with these seeds (more seeds would decide): s=8 (inconclusive" in why
    assert "fastest" not in why


def test_different_held_counts_are_never_called_tied():
    # s=2 misses the target in one seed: censored, it can be slower, never tied.
    times = {2: [5.0, None, 5.2, 5.1], 8: [5.0, 5.1, 5.2, 5.1]}
    res = run_halving([2, 8], 4, fake_runner(times), min_seeds=4)
    bound, why = recommend_bound(res)
    assert bound == 8
    # One censored seed of four: s=2 cannot be tied, and is not shown slower by more than the margin.
    assert why.startswith("s=8 has the lowest median time, but is not shown faster")
    assert "held 3/4" in why and "censored at the cap: 1/4" in why
    assert "tied with" not in why and "no measurable cost" not in why


def test_the_lowest_median_is_not_called_fastest_without_a_verdict():
    # Two seeds a side (the old early rungs): nothing is decided, so nothing is "the fastest".
    times = {0: [1.08, 1.03], 1: [1.39, 1.32], 8: [1.39, 1.32]}
    res = run_halving([0, 1, 8], 2, fake_runner(times), min_seeds=2)
    bound, why = recommend_bound(res, ["bounds ≥ 1 never bind here (no worker waited): identical runs"])
    assert bound == 0
    assert why.startswith("s=0 has the lowest median time, but is not shown faster than every other bound")
    assert "inconclusive: too few seeds" in why and "fastest" not in why
    assert "; bounds ≥ 1 never bind here (no worker waited): identical runs (" in why


def test_no_target_held_means_no_recommendation():
    times = {1: [None] * 3, 2: [None] * 3}
    assert recommend_bound(run_halving([1, 2], 3, fake_runner(times)))[0] is None
