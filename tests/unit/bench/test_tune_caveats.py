"""psgd.bench.tune_caveats: what the tuner says beyond its verdicts; each case
builds the runs, and what must be said follows from how they were built."""
import pytest

from psgd.bench.outcomes import RunOutcome
from psgd.bench.tune_caveats import TuneCaveats, grid_edge, never_bind_from, rate_beyond


def runs(bound, times, lr=0.1, examples=None):
    return [RunOutcome(f"ssp:{bound}", k, lr, t, 0.9, 2.0, examples[k] if examples else 400)
            for k, t in enumerate(times)]


SAME = [1.08, 1.03, 1.39]


def test_bounds_that_ran_one_run_never_bind_from_the_smallest_of_them():
    # s = 1 runs the same seeds as s = 2, 4, 8, whose clock gaps (1) stayed below them; s = 0 differs.
    outcomes = {0: runs(0, [1.5, 1.4, 1.6]), 1: runs(1, SAME), 2: runs(2, SAME), 4: runs(4, SAME), 8: runs(8, SAME)}
    gaps = {0: [0, 0, 0], 1: [1, 1, 1], 2: [1, 1, 1], 4: [1, 1, 1], 8: [1, 1, 1]}
    assert never_bind_from(outcomes, gaps) == (1, True)
    lines = TuneCaveats(*never_bind_from(outcomes, gaps)).lines()
    assert lines == ["bounds ≥ 1 never bind here (no worker waited): identical runs"]


def test_a_bound_that_made_a_worker_wait_is_not_flagged():
    # s = 1's runs differ from the free bounds' (another example count): it bound; so did s = 0.
    outcomes = {1: runs(1, SAME, examples=[400, 404, 400]), 2: runs(2, SAME), 8: runs(8, SAME)}
    gaps = {1: [1, 1, 1], 2: [1, 1, 1], 8: [1, 1, 1]}
    assert never_bind_from(outcomes, gaps) == (2, True)
    # A gap at the bound (a worker may have waited) with different runs: nothing below 8 is flagged.
    outcomes = {2: runs(2, [1.2, 1.1, 1.3]), 8: runs(8, SAME)}
    assert never_bind_from(outcomes, {2: [2, 2, 2], 8: [3, 3, 3]}) == (None, False)


def test_free_bounds_with_different_runs_are_not_called_identical():
    # Gaps below both bounds, yet different runs (another rate): no worker waited, not identical.
    outcomes = {4: runs(4, SAME, lr=0.05), 8: runs(8, SAME)}
    assert never_bind_from(outcomes, {4: [2, 3, 2], 8: [2, 3, 2]}) == (4, False)
    assert TuneCaveats(4, False).lines() == ["bounds ≥ 4 never bind here (no worker waited)"]


def test_grid_ends_and_the_point_beyond():
    grid = [0.05, 0.1, 0.2, 0.4]
    assert [grid_edge(x, grid) for x in grid] == ["low", "", "", "high"]
    assert grid_edge(0.1, [0.1]) == ""
    assert rate_beyond(grid, "high") == pytest.approx(0.8) and rate_beyond(grid, "low") == pytest.approx(0.025)
    c = TuneCaveats(rates_at_edge={0: "high", 8: "high"}, extended={0: 0.8, 8: 0.8})
    assert c.lines() == ["rate at an end of its grid (extended by one point): s=0 (high end), s=8 (high end)"]
