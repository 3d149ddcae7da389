"""The held-target rule (psgd.core.target) that summary.json, the bench and the
tuner all time runs by: exact times on hand-checked sequences."""
import pytest

from psgd.config import load_config
from psgd.core.target import TargetHold, held_target_time, metric_series, run_target
from psgd.orchestrate.records.summary import summarize


def test_held_target_ignores_a_touch_that_falls_back():
    t = [0, 1, 2, 3, 4, 5, 6, 7]
    acc = [0.5, 0.91, 0.80, 0.90, 0.895, 0.92, 0.93, 0.94]
    rule = TargetHold(hold_evals=3, tolerance=0.01)
    # 1: falls to 0.80 right after; 3: the next three stay >= 0.89
    assert held_target_time(t, acc, 0.9, rule=rule) == 3.0
    # with no tolerance, 0.895 breaks the hold at t=3 and t=5 is the first held
    assert held_target_time(t, acc, 0.9, rule=TargetHold(3, 0.0)) == 5.0
    assert held_target_time(t, acc, 0.9, rule=TargetHold(0, 0.0)) == 1.0


def test_held_target_at_the_end_of_a_run():
    rule = TargetHold(hold_evals=3, tolerance=0.01)
    # reached two evaluations before the end, and the run ends above target
    assert held_target_time([0, 1, 2, 3], [0.1, 0.9, 0.95, 0.91], 0.9, rule=rule) == 1.0
    # ... but a run that ends below the target was not holding it
    assert held_target_time([0, 1, 2, 3], [0.1, 0.9, 0.95, 0.895], 0.9, rule=rule) is None
    assert held_target_time([], [], 0.9) is None


def test_held_target_for_a_loss():
    t = [0.0, 0.5, 1.0, 1.5, 2.0]
    loss = [3.0, 1.9, 2.2, 1.95, 1.9]
    assert held_target_time(t, loss, 2.0, higher_is_better=False, rule=TargetHold(2, 0.05)) == 1.5
    assert held_target_time(t, loss, 2.0, higher_is_better=False, rule=TargetHold(2, 0.25)) == 0.5


def test_held_target_rejects_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        held_target_time([1, 0], [0.9, 0.9], 0.5)
    with pytest.raises(ValueError, match="length"):
        held_target_time([0, 1], [0.9], 0.5)
    with pytest.raises(ValueError, match="hold_evals"):
        TargetHold(-1)


def test_run_target_prefers_train_target_and_falls_back_to_target_accuracy():
    cfg = load_config(None, ["train.target_accuracy=0.8"])
    assert run_target(cfg.train) == ("accuracy", 0.8, TargetHold())
    cfg = load_config(None, ["train.target={metric: loss, value: 2.0, hold_evals: 1, tolerance: 0.1}"])
    assert run_target(cfg.train) == ("loss", 2.0, TargetHold(1, 0.1))
    assert run_target(load_config(None, ["train.target_accuracy=null"]).train) is None


def test_metric_series_sorts_by_time_and_skips_evaluations_without_the_metric():
    evals = [{"t": 2.0, "accuracy": 0.5}, {"t": 1.0, "accuracy": 0.4, "test_loss": 1.0}, {"t": 3.0}]
    assert metric_series(evals, "accuracy") == ([1.0, 2.0], [0.4, 0.5])
    assert metric_series(evals, "loss") == ([1.0], [1.0])


def test_summary_times_the_target_reached_and_held_not_the_first_touch():
    cfg = load_config(None, ["train.target_accuracy=0.9"])
    accs = [0.5, 0.91, 0.80, 0.90, 0.895, 0.92, 0.93]
    events = [{"event": "eval", "t": float(i), "accuracy": a, "test_loss": 1.0} for i, a in enumerate(accs)]
    assert summarize(cfg, events, wall_time_s=7.0)["time_to_target_s"] == 3.0
    assert summarize(cfg, events[:3], wall_time_s=3.0)["time_to_target_s"] is None  # ended below the target


def test_the_resolution_of_an_accuracy_target_is_one_example_and_its_binomial_noise():
    import math

    from psgd.core.target import MIN_ACCURACY_EXAMPLES, metric_resolution
    small = metric_resolution("accuracy", 360, 0.93)
    assert small.step == 1 / 360 and small.noise_sd == pytest.approx(math.sqrt(0.93 * 0.07 / 360)) and not small.smooth
    assert "steps of 0.28%" in small.text() and "s.d. at the target is 1.34%" in small.text()
    assert "a loss target (train.target: {metric: loss}) is smoother" in small.text()
    big = metric_resolution("accuracy", MIN_ACCURACY_EXAMPLES, 0.93)
    assert big.smooth and big.text().endswith("%.")
    loss = metric_resolution("loss", 360, 0.5)
    assert loss.smooth and loss.step is None and "continuous" in loss.text()
    with pytest.raises(ValueError, match="unknown metric"):
        metric_resolution("f1", 360, 0.5)
    with pytest.raises(ValueError, match="held-out"):
        metric_resolution("loss", 0, 0.5)


def test_reports_state_the_resolution_of_the_configs_own_held_out_split():
    from psgd.bench.target_resolution import held_out_examples, target_resolution_line
    from psgd.config import load_config
    cfg = load_config(None, ["task.dataset=digits", "train.target_accuracy=0.93"])
    n = held_out_examples(cfg)
    assert n > 0
    assert target_resolution_line(cfg) == metric_resolution_text("accuracy", n, 0.93)
    loss = load_config(None, ["task.dataset=digits", "train.target={metric: loss, value: 0.3}"])
    assert target_resolution_line(loss).startswith(f"Target resolution: test loss, a mean over {n:,} held-out")


def metric_resolution_text(metric, n, value):
    from psgd.core.target import metric_resolution
    return metric_resolution(metric, n, value).text()
