"""Successive halving drives the tuner: who runs how many seeds, and what it recommends."""
from psgd.bench.outcomes import RunOutcome
from psgd.bench.stats import Rung
from psgd.bench.tune_halving import recommend_bound, run_halving

# bound -> time to target for seed offsets 0, 1, 2 (None: not reached)
TIMES = {0: [9.0, 9.5, 10.0], 1: [5.0, 5.5, 6.0], 2: [5.2, 5.4, 5.9], 4: [7.0, 7.5, 8.0], 8: [None, None, 12.0]}


def fake_runner(times, calls):
    def run_arm(bound, offsets):
        calls.append((bound, offsets))
        return [RunOutcome(f"ssp:{bound}", k, 0.1, times[bound][k], 0.9, 10.0, 100) for k in offsets]
    return run_arm


def test_halving_runs_the_schedule_and_keeps_the_fastest():
    calls = []
    res = run_halving([0, 1, 2, 4, 8], 3, fake_runner(TIMES, calls))
    assert res.rungs == [Rung(5, 1), Rung(3, 2), Rung(2, 3)]
    assert calls == [(0, [0]), (1, [0]), (2, [0]), (4, [0]), (8, [0]),   # rung 0: everyone, 1 seed
                     (1, [1]), (2, [1]), (4, [1]),                        # rung 1: best 3 by median
                     (1, [2]), (2, [2])]                                  # rung 2: best 2
    assert res.runs == 10 < 5 * 3
    assert res.stopped_at == {0: 0, 8: 0, 4: 1}
    assert res.finalists() == [1, 2]


def test_recommends_the_smallest_bound_when_finalists_are_indistinguishable():
    res = run_halving([0, 1, 2, 4, 8], 3, fake_runner(TIMES, []))
    bound, why = recommend_bound(res)
    assert bound == 1
    assert why.startswith("indistinguishable: the finalists' time-to-target intervals overlap (s=1: 5.50 s")


def test_recommends_the_smallest_bound_tied_with_a_separated_fastest():
    times = {1: [9.0, 9.5, 10.0], 2: [5.0, 5.5, 6.0], 4: [5.2, 5.4, 5.9]}
    res = run_halving([1, 2, 4], 3, fake_runner(times, []), min_seeds=3)
    bound, why = recommend_bound(res)
    assert bound == 2
    assert why.startswith("s=2 is the smallest bound indistinguishable from the fastest (s=4); "
                          "slower with separated intervals: s=1")


def test_no_target_held_means_no_recommendation():
    times = {1: [None] * 3, 2: [None] * 3}
    assert recommend_bound(run_halving([1, 2], 3, fake_runner(times, [])))[0] is None
