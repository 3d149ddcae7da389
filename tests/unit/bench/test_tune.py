"""`psgd tune staleness`: bound parsing and the tuner's table on hand-made outcomes."""
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from psgd.bench.convergence import BenchResult
from psgd.bench.convergence_report import TargetSpec
from psgd.bench.outcomes import RunOutcome
from psgd.bench.stats import median_ci
from psgd.bench.tune import TuneResult, parse_bounds, resolution_line, staleness_table
from psgd.bench.tune_halving import run_halving
from psgd.core.target import TargetHold


@pytest.mark.parametrize("text", ["", "1,x", "-1", "2,2"])
def test_parse_bounds_rejects_bad_lists(text):
    with pytest.raises(ValueError, match="--bounds"):
        parse_bounds(text)


def test_parse_bounds_sorts():
    assert parse_bounds("4,0,2") == [0, 2, 4]


def test_table_shows_seeds_intervals_and_when_each_bound_stopped():
    times = {0: [9.0, 9.5, 9.2], 2: [5.0, 5.5, 6.0, 5.2, 5.4, 5.6], 4: [5.2, None, 5.9, 5.3, 5.5, 5.7]}

    def run_arm(bound, offsets):
        return [RunOutcome(f"ssp:{bound}", k, 0.1, times[bound][k], 0.9, 10.0, 100) for k in offsets]
    halving = run_halving([0, 2, 4], 6, run_arm, min_seeds=3)
    t = TuneResult(BenchResult(Path("/x"), [], [], TargetSpec("accuracy", 0.9, TargetHold())), halving, 2, "why", 18)
    lines = staleness_table(t).splitlines()
    assert lines[0].startswith("| bound s | lr | seeds run | held test accuracy 0.9 |")
    # After three seeds s=0 takes 1.7x s=2's time: slower, it stops. s=4 missed the target
    # in its second seed (censored at 10 s): not decided, it goes on.
    def iv(b):
        return median_ci([x if x is not None else math.inf for x in times[b]]).time_text(" s")
    assert lines[2] == f"| 0 | 0.1 | 3 | 3/3 | {iv(0)} | 9.00, 9.50, 9.20 | after rung 0 |"
    assert lines[3] == f"| 2 | 0.1 | 6 | 6/6 | {iv(2)} | 5.00, 5.50, 6.00, 5.20, 5.40, 5.60 | finalist (rung 1) |"
    assert lines[4] == f"| 4 | 0.1 | 6 | 5/6 | {iv(4)} | 5.20, n.h., 5.90, 5.30, 5.50, 5.70 | finalist (rung 1) |"


def _tune_with_evals(times, eval_times):
    def run_arm(bound, offsets):
        return [RunOutcome(f"ssp:{bound}", k, 0.1, times[bound][k], 0.9, 10.0, 100) for k in offsets]
    runs = [SimpleNamespace(training_evals=[{"t": x} for x in ts]) for ts in eval_times]
    bench = BenchResult(Path("/x"), runs, [], TargetSpec("accuracy", 0.9, TargetHold()))
    return TuneResult(bench, run_halving(sorted(times), 1, run_arm), 0, "why", len(times))


def test_resolution_line_warns_when_evaluations_are_as_coarse_as_the_times():
    # Every bound held the target after about 1 s, evaluated once a second: 100%, not resolved.
    coarse = _tune_with_evals({0: [1.0], 2: [2.0]}, [[1.0, 2.0, 3.0], [1.0, 2.0]])
    assert resolution_line(coarse) == ("Time resolution: evaluations every 1.00 s (median spacing), 100.0% of the "
                                       "fastest bound's median time to target: differences under two evaluation "
                                       "periods are not resolved; lower eval.every_s to resolve them.")
    fine = _tune_with_evals({0: [4.0], 2: [5.0]}, [[0.0, 0.1, 0.2, 0.3]])
    assert resolution_line(fine).endswith("0.100 s (median spacing), 2.5% of the fastest bound's median time to "
                                          "target (within 5%).")
    never = _tune_with_evals({0: [None]}, [[0.0, 0.1]])
    assert resolution_line(never).startswith("Time resolution: not measurable")


def test_outputs_name_the_stopped_bounds_and_draw_time_by_bound(tmp_path):
    from psgd.bench.tune import write_tune_outputs
    times = {0: [9.0, 9.5, 9.2], 2: [5.0, 5.5, 6.0, 5.2, 5.4, 5.6]}

    def run_arm(bound, offsets):
        return [RunOutcome(f"ssp:{bound}", k, 0.1, times[bound][k], 0.9, 10.0, 100) for k in offsets]
    halving = run_halving([0, 2], 6, run_arm, min_seeds=3)
    t = TuneResult(BenchResult(tmp_path, [], [], TargetSpec("accuracy", 0.9, TargetHold())), halving, 2, "why", 9,
                   rates={0: 0.1, 2: 0.1})
    outputs = write_tune_outputs(t, "run: {}", "psgd tune", [])
    stopped = median_ci(times[0]).time_text(" s")
    assert f"\nSlower than the fastest, so stopped: s=0 after rung 0 ({stopped}).\n" in outputs.lines
    assert [p.name for p in outputs.files[:3]] == ["tune.md", "tune.csv", "time_to_target_by_bound.png"]
    assert all(p.is_file() for p in outputs.files)
    assert "![held time to target by bound](time_to_target_by_bound.png)" in (tmp_path / "tune.md").read_text()
