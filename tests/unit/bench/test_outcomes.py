"""Per-run outcomes, per-mode intervals, the conclusion and the literature verdicts, on known numbers."""
import math

import pytest

from psgd.bench.outcomes import (
    RunOutcome,
    censored_time_s,
    conclusion,
    examples_per_update,
    mode_stats,
    resolution_check,
)
from psgd.bench.stats import Interval
from psgd.bench.verdict import Outcome, Sample, judge
from psgd.core.target import TargetHold, metric_series


def outcome(label, seed, ttt, final=0.9, lr=0.1):
    return RunOutcome(label, seed, lr, ttt, final, 10.0, 1000)


def test_examples_per_update_counts_averaged_gradients():
    assert examples_per_update("bsp", 4, 32) == 128
    assert examples_per_update("bsp", 4, 32, backup_workers=1) == 96
    assert examples_per_update("allreduce", 4, 32) == 128
    assert examples_per_update("ssp", 4, 32) == examples_per_update("asp", 4, 32) == 32


def test_outcome_uses_the_held_rule_and_the_chosen_metric():
    evals = [{"t": 0.0, "accuracy": 0.1, "test_loss": 3.0}, {"t": 1.0, "accuracy": 0.9, "test_loss": 1.0},
             {"t": 2.0, "accuracy": 0.7, "test_loss": 1.6}, {"t": 3.0, "accuracy": 0.91, "test_loss": 0.9},
             {"t": 4.0, "accuracy": 0.92, "test_loss": 0.8}, {"t": 5.0, "accuracy": None}]
    assert metric_series(evals, "loss") == ([0.0, 1.0, 2.0, 3.0, 4.0], [3.0, 1.0, 1.6, 0.9, 0.8])
    o = RunOutcome.from_evals("bsp", 0, 0.1, evals, "accuracy", 0.9, TargetHold(2, 0.01), 4.5, 100, 128)
    assert (o.time_to_target_s, o.final_metric, o.examples) == (3.0, 0.92, 12800)
    lo = RunOutcome.from_evals("bsp", 0, 0.1, evals, "loss", 1.0, TargetHold(2, 0.0), 4.5, 100, 128)
    assert lo.time_to_target_s == 3.0 and lo.final_metric == 0.8


def test_a_diverged_runs_final_metric_is_its_worst_value_and_the_stats_take_it():
    evals = [{"t": 0.0, "accuracy": 0.1, "test_loss": 3.0}, {"t": 1.0, "accuracy": 0.0, "test_loss": math.nan}]
    lo = RunOutcome.from_evals("asp", 0, 0.1, evals, "loss", 1.0, TargetHold(2, 0.0), 1.0, 10, 4)
    assert lo.time_to_target_s is None and lo.final_metric == math.inf
    evals[-1]["accuracy"] = math.nan
    acc = RunOutcome.from_evals("asp", 0, 0.1, evals, "accuracy", 0.9, TargetHold(2, 0.0), 1.0, 10, 4)
    assert acc.final_metric == -math.inf
    fine = RunOutcome.from_evals("asp", 1, 0.1, evals[:1], "loss", 1.0, TargetHold(2, 0.0), 1.0, 10, 4)
    assert mode_stats([lo, fine])["asp"].final.high == math.inf   # no NaN reaches median_ci


def test_mode_stats_medians_intervals_and_ratio_to_bsp():
    runs = [outcome("bsp", s, t) for s, t in enumerate([10.0, 12.0, 11.0])]
    runs += [outcome("ssp:2", s, t) for s, t in enumerate([5.0, 6.0, 5.5])]
    runs += [outcome("asp", s, t) for s, t in enumerate([9.0, None, 13.0])]
    st = mode_stats(runs)
    assert st["bsp"].time == Interval(11.0, 10.0, 12.0, 3)
    assert st["ssp:2"].ratio_to_bsp == pytest.approx(0.5)
    assert st["bsp"].ratio_to_bsp == 1.0
    assert st["asp"].reached == 2 and st["asp"].time.median == 13.0 and st["asp"].time.high == math.inf
    assert st["asp"].ratio_to_bsp == pytest.approx(13.0 / 11.0)
    with pytest.raises(ValueError, match="learning rates"):
        mode_stats([outcome("bsp", 0, 1.0, lr=0.1), outcome("bsp", 1, 1.0, lr=0.2)])


def test_conclusion_groups_modes_by_the_verdict_rule():
    runs = [outcome("bsp", s, t) for s, t in enumerate([10.0, 12.0, 11.0, 10.5, 11.5])]
    runs += [outcome("ssp:2", s, t) for s, t in enumerate([5.0, 6.0, 5.5, 5.2, 5.8])]
    runs += [outcome("ssp:4", s, t) for s, t in enumerate([10.8, 11.2, 11.0, 10.9, 11.1])]
    runs += [outcome("asp", s, t) for s, t in enumerate([6.0, 16.0, 11.5, 8.0, 14.0])]
    runs += [outcome("allreduce", s, None) for s in range(5)]   # never held it within its 10 s runs
    st = mode_stats(runs)
    assert st["allreduce"].caps == (10.0,) * 5 and st["allreduce"].sample().n_censored == 5
    want = {label: st[label].versus(st["bsp"]) for label in ("ssp:2", "ssp:4", "asp", "allreduce")}
    assert want["ssp:2"].outcome is Outcome.FASTER and want["ssp:4"].outcome is Outcome.TIED
    assert want["asp"].outcome is Outcome.INCONCLUSIVE   # its interval overlaps bsp's: not a tie, not a win
    # censored at 10 s, under bsp's 11 s: it might be anything above, so nothing is decided
    assert want["allreduce"].outcome is Outcome.INCONCLUSIVE
    text = conclusion(st, "test accuracy 0.9")
    assert text[0] == "Time to hold test accuracy 0.9, median [95% CI] over seeds; bsp: 11.0 [10.0, 12.0] s."
    assert text[1] == f"Faster than bsp (ratio interval below 1 - margin): ssp:2 ({st['ssp:2'].time.time_text()}; " \
                      f"{want['ssp:2'].text()})."
    assert text[2].startswith("Tied with bsp (ratio interval inside the margin): ssp:4 (")
    assert text[3].startswith("Inconclusive against bsp with these seeds: asp (") and "allreduce (" in text[3]
    assert "censored at the cap: 5/5 and 0/5 seeds" in text[3]


def test_one_seed_is_never_called_faster_or_slower():
    assert judge(Sample.of([5.0]), Sample.of([10.0, 9.0, 11.0])).outcome is Outcome.INCONCLUSIVE
    runs = [outcome("bsp", 0, 10.0), outcome("asp", 0, 5.0)]
    text = conclusion(mode_stats(runs), "test accuracy 0.9")
    assert text[1].startswith("Inconclusive against bsp with these seeds: asp (5.00 [5.00, 5.00] s")


def test_resolution_check():
    spacing, ok = resolution_check([[0.0, 0.2, 0.4, 0.6], [0.0, 0.3]], baseline_median_s=5.0)
    assert spacing == pytest.approx(0.2) and ok
    assert resolution_check([[0.0, 0.5, 1.0]], 5.0) == (0.5, False)
    assert resolution_check([[0.0]], 5.0) == (math.inf, False)


def test_resolution_against_a_baseline_that_never_held_the_target():
    # BSP held the target in no seed within 18 s: its time exceeds 18 s, so 0.5 s spacing is within 5%.
    runs = [RunOutcome("bsp", seed, 0.1, None, 0.4, dur, 1000) for seed, dur in enumerate((18.5, 18.0, 18.3))]
    assert censored_time_s(runs) == 18.0
    assert resolution_check([[0.0, 0.5, 1.0]], math.inf, baseline_at_least_s=18.0) == (0.5, True)
    assert resolution_check([[0.0, 1.0, 2.0]], math.inf, baseline_at_least_s=18.0) == (1.0, False)
    assert resolution_check([[0.0, 0.5]], math.inf) == (0.5, False)
    assert censored_time_s([outcome("bsp", 0, 7.0)]) is None
