"""`psgd tune staleness`: the recommendation rule on hand-made results (exact),
and one real smoke run of the CLI on a tiny config."""
import math
from pathlib import Path
import pytest
from psgd.bench.run_data import RunData
from psgd.bench.tune import BoundResult, parse_bounds, recommend, tabulate


def _run(bound, ttt, acc):
    return RunData(Path("/r"), f"ssp:{bound}", {"time_to_target_s": ttt, "final_test_accuracy": acc})


def test_tabulate_takes_medians_and_counts_seeds_that_reached_the_target():
    runs = [_run(0, 4.0, 0.9), _run(0, 6.0, 0.92), _run(0, 5.0, 0.91), _run(2, None, 0.85), _run(2, 3.0, 0.9)]
    rows = tabulate(runs, [0, 2, 8])
    assert (rows[0].seeds, rows[0].reached, rows[0].median_time_s, rows[0].median_accuracy) == (3, 3, 5.0, 0.91)
    assert (rows[1].reached, math.isinf(rows[1].median_time_s), rows[1].times) == (1, True, [None, 3.0])
    assert rows[2].seeds == 0


def test_recommends_the_fastest_bound_that_always_reached_the_target():
    rows = [BoundResult(0, 3, 3, 6.0, [], 0.9), BoundResult(2, 3, 3, 4.0, [], 0.9),
            BoundResult(8, 3, 2, 2.0, [], 0.8)]
    bound, why = recommend(rows, 0.9)
    assert bound == 2  # s=8 is faster in median but missed the target in one seed
    assert why.startswith("s=2 reached 0.9 in 3/3 seeds with median time 4.00s")


def test_near_ties_go_to_the_smallest_bound():
    rows = [BoundResult(1, 3, 3, 4.1, [], 0.9), BoundResult(4, 3, 3, 4.0, [], 0.9)]
    bound, why = recommend(rows, 0.9)
    assert bound == 1 and "within 5% of the fastest" in why


def test_without_any_hit_the_best_final_accuracy_is_named():
    rows = [BoundResult(0, 2, 0, math.inf, [None, None], 0.7), BoundResult(4, 2, 0, math.inf, [None, None], 0.8)]
    bound, why = recommend(rows, 0.99)
    assert bound == 4 and why.startswith("no bound reached 0.99")


@pytest.mark.parametrize("text", ["", "1,x", "-1", "2,2"])
def test_parse_bounds_rejects_bad_lists(text):
    with pytest.raises(ValueError, match="--bounds"):
        parse_bounds(text)
