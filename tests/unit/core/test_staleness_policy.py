"""The adaptive bound policy on synthetic step-time traces."""
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psgd.core.staleness_policy import BoundLimits, StalenessPolicy

BASE = 0.01  # a typical worker's step time in the traces (seconds)


def jitter(rank: int, clock: int) -> float:
    """Deterministic +-5% timing noise."""
    return 1.0 + 0.05 * math.sin(7.0 * clock + 3.0 * rank)


def run(trace, rule: BoundLimits, workers: int, clocks: int, start: int):
    """Feed every worker's step time for clocks 0..clocks-1 in lock-step and apply
    each decision as the shard would. Returns [(decision clock, bound)]."""
    policy = StalenessPolicy(rule, workers)
    bound, out = start, []
    for clock in range(clocks):
        for rank in range(workers):
            policy.observe(rank, clock, trace(rank, clock))
        due = policy.decision_due(clock + 1)  # every worker is now at clock + 1
        if due is not None:
            bound = policy.decide(due, bound, range(workers)).bound
            out.append((due, bound))
    return out


def even(rank, clock):
    return BASE * jitter(rank, clock)


def persistent(mult, slow_rank=3):
    return lambda rank, clock: BASE * jitter(rank, clock) * (mult if rank == slow_rank else 1.0)


def test_even_workers_keep_the_minimum():
    rule = BoundLimits(staleness_min=1, staleness_max=8)
    bounds = [b for _, b in run(even, rule, 4, 80, start=1)]
    assert bounds and set(bounds) == {1}


def test_one_persistent_laggard_widens_to_its_lag():
    # 3x slower: ceil(3 - 1 - 0.5) = 2 extra clocks; jitter of +-5% does not change that.
    rule = BoundLimits(staleness_min=0, staleness_max=8)
    out = run(persistent(3.0), rule, 4, 60, start=0)
    first_with_data = next(b for c, b in out if c >= rule.window)
    assert first_with_data == 2
    assert all(b == 2 for c, b in out if c >= rule.window)
    # 6x slower: lag within 6 * (1 +- 0.05), so ceil(lag - 1.5) is 5 at every window
    assert {b for c, b in run(persistent(6.0), rule, 4, 60, start=0) if c >= rule.window} == {5}


def test_a_wide_lag_is_clamped_to_the_maximum():
    rule = BoundLimits(staleness_min=0, staleness_max=3)
    out = run(persistent(20.0), rule, 4, 40, start=0)
    assert max(b for _, b in out) == 3 and out[-1][1] == 3


def test_even_workers_narrow_a_wide_bound_one_step_per_patience_decisions():
    rule = BoundLimits(staleness_min=1, staleness_max=8, every=4, patience=2)
    out = run(even, rule, 4, 100, start=6)
    bounds = [b for _, b in out]
    assert bounds[-1] == 1
    # never jumps: each decision narrows by at most one
    steps = [a - b for a, b in zip([6] + bounds, bounds)]
    assert all(s in (0, 1) for s in steps)
    # the first decision with data only casts a vote (patience 2)
    with_data = [b for c, b in out if c >= rule.window]
    assert with_data[0] == 6 and with_data[1] == 5


def test_transient_laggard_widens_then_narrows_back():
    rule = BoundLimits(staleness_min=0, staleness_max=8)

    def transient(rank, clock):
        slow = rank == 2 and 30 <= clock < 50
        return BASE * jitter(rank, clock) * (4.0 if slow else 1.0)

    out = run(transient, rule, 4, 140, start=0)
    before = [b for c, b in out if c <= 30]
    during = [b for c, b in out if 36 <= c <= 50]
    assert set(before) == {0}
    assert max(during) == 3          # ceil(4 - 1.5)
    assert out[-1][1] == 0           # back at the minimum once the lag is gone


def test_one_outlier_step_does_not_widen():
    # With window 10 and quantile 0.9 the second-largest sample counts, so a
    # single 10x step (a GC pause) is ignored.
    rule = BoundLimits(staleness_min=0, staleness_max=8, window=10, quantile=0.9)

    def one_pause(rank, clock):
        return BASE * jitter(rank, clock) * (10.0 if (rank, clock) == (1, 25) else 1.0)

    assert {b for _, b in run(one_pause, rule, 4, 60, start=0)} == {0}


def test_no_reported_times_keeps_the_bound():
    rule = BoundLimits(staleness_min=0, staleness_max=8)
    assert {b for _, b in run(lambda r, c: 0.0, rule, 4, 40, start=3)} == {3}
    # a single worker has nobody to wait for
    assert {b for _, b in run(persistent(5.0, slow_rank=0), rule, 1, 40, start=2)} == {2}


def test_decisions_do_not_depend_on_arrival_order_or_on_clocks_beyond_the_decision():
    """Two shards get the same pushes in different orders, and one has already
    received fast workers' pushes for later clocks: same decision."""
    rule = BoundLimits(staleness_min=0, staleness_max=8)
    trace = persistent(3.5, slow_rank=0)
    pushes = [(r, c, trace(r, c)) for c in range(24) for r in range(4)]
    a, b = StalenessPolicy(rule, 4), StalenessPolicy(rule, 4)
    for r, c, s in pushes:
        if c < 20:
            a.observe(r, c, s)
    shuffled = list(pushes)
    random.Random(5).shuffle(shuffled)
    for r, c, s in sorted(shuffled, key=lambda p: (p[0], p[1])):  # per-worker order is kept (seq)
        if c < 20 or r != 0:   # shard b also holds the fast workers' later clocks
            b.observe(r, c, s)
    assert a.decide(20, 1, range(4)) == b.decide(20, 1, range(4))


def test_decision_due_fires_once_per_multiple():
    policy = StalenessPolicy(BoundLimits(every=4), 2)
    assert [policy.decision_due(m) for m in (None, 0, 3, 4, 4, 5, 9, 12)] == [None, None, None, 4, None, None, 8, 12]


def test_rule_rejects_bad_limits():
    with pytest.raises(ValueError, match="staleness_max"):
        BoundLimits(staleness_min=4, staleness_max=2)
    with pytest.raises(ValueError, match="staleness_min"):
        BoundLimits(staleness_min=-1)


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(0, 5), span=st.integers(0, 6), start=st.integers(0, 20),
       seed=st.integers(0, 10**6), workers=st.integers(1, 6))
def test_never_leaves_min_max(lo, span, start, seed, workers):
    rule = BoundLimits(staleness_min=lo, staleness_max=lo + span, every=2, window=4, patience=1)
    rng = random.Random(seed)
    times = {(r, c): rng.choice([0.0, BASE, BASE * rng.uniform(1, 30)]) for r in range(workers) for c in range(40)}
    out = run(lambda r, c: times[(r, c)], rule, workers, 40, start=start)
    assert out and all(lo <= b <= lo + span for _, b in out)


def test_a_lag_hovering_at_a_threshold_does_not_flip_the_bound():
    # lag alternating 5.4 / 5.6 (from bound 4 and 5 territory): once widened to
    # ceil(5.6 - 1.5) = 5, a 5.4 lag (ceil(5.4 - 1.25) = 5) is not a vote to narrow.
    # Each 4-clock window is all 5.4 or all 5.6.
    rule = BoundLimits(staleness_min=0, staleness_max=8, patience=1, every=4, window=4)

    def hover(rank, clock):
        if rank != 3:
            return BASE
        return BASE * (5.6 if (clock // 4) % 2 else 5.4)

    out = run(hover, rule, 4, 80, start=0)
    assert out[:2] == [(4, 4), (8, 5)]         # 5.4 asks for 4, then 5.6 for 5
    assert {b for c, b in out[2:]} == {5}      # and 5.4 alone never narrows it again


@pytest.mark.parametrize("lie", [1e307, 1e300, 1000.0, 1e-300])
def test_no_reported_step_time_can_crash_or_unbound_the_decision(lie):
    # Every shard sees the same lies, so a crash here would stop all of them at once.
    from psgd.core.staleness_policy import BoundLimits, StalenessPolicy
    rule = BoundLimits(staleness_min=1, staleness_max=6)
    policy = StalenessPolicy(rule, 3)
    for clock in range(rule.window + 1):
        for rank in range(3):
            policy.observe(rank, clock, lie if rank == 2 else 0.01)
    decision = policy.decide(rule.window, 1, [0, 1, 2])
    assert rule.staleness_min <= decision.bound <= rule.staleness_max
    assert math.isfinite(decision.lag) and math.isfinite(decision.pace_s)
