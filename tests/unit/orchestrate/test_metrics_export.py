"""metrics.csv and TensorBoard files from a run's events (no processes)."""
import csv

import pytest

from psgd.config import load_config
from psgd.orchestrate.records.metrics_export import (
    CSV_COLUMNS,
    MetricsExport,
    eval_updates,
    examples_per_update,
    export_events,
)


def _stats(index, version, staleness, gaps):
    return {"t": 0.1, "role": "server", "index": index, "event": "server_stats", "version": version,
            "staleness_hist": staleness, "clock_gap_hist": gaps}


EVENTS = [
    {"t": 0.1, "role": "worker", "index": 0, "event": "step", "loss": 2.0},
    {"t": 0.2, "role": "worker", "index": 1, "event": "step", "loss": 1.0},
    _stats(0, 40, {"0": 10, "2": 30}, {"0": 5, "3": 35}),
    _stats(1, 41, {"1": 41}, {"1": 41}),
    {"t": 1.0, "role": "evaluator", "index": 0, "event": "eval", "accuracy": 0.5, "test_loss": 1.5,
     "updates": 40, "versions": [40, 39]},
    {"t": 1.5, "role": "worker", "index": 0, "event": "step", "loss": 0.5},
    _stats(0, 100, {"0": 10, "2": 30, "5": 60}, {"0": 5, "3": 95}),  # cumulative: replaces shard 0's
    {"t": 3.0, "role": "evaluator", "index": 0, "event": "eval", "accuracy": 0.75, "test_loss": 0.75,
     "updates": 100, "versions": [100, 100], "final": True},
]


def _cfg(*sets):
    return load_config(None, ["task.batch_size=16", "cluster.workers=4", *sets])


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_one_csv_row_per_evaluation_with_the_run_figures(tmp_path):
    export_events(tmp_path, _cfg(), EVENTS)
    rows = _rows(tmp_path / "metrics.csv")
    assert list(rows[0]) == CSV_COLUMNS and len(rows) == 2
    first, last = rows
    assert (first["t_s"], first["updates"], first["examples"]) == ("1.0", "40", "640")
    assert float(first["train_loss"]) == 1.5 and float(first["updates_per_s"]) == 40.0
    # shard 0 {0:10, 2:30} + shard 1 {1:41}: mean (60 + 41) / 81, max 2; gaps max 3
    assert float(first["staleness_mean"]) == pytest.approx(101 / 81, abs=1e-4)
    assert (first["staleness_max"], first["max_clock_gap"], first["final"]) == ("2", "3", "False")
    assert (last["updates"], last["examples"], float(last["train_loss"])) == ("100", "1600", 0.5)
    assert float(last["updates_per_s"]) == 30.0  # (100 - 40) updates in 2 s
    assert float(last["staleness_mean"]) == pytest.approx((60 + 300 + 41) / 141, abs=1e-4)
    assert (last["staleness_max"], last["final"]) == ("5", "True")


def test_resuming_appends_rows_under_one_header(tmp_path):
    for half in (EVENTS[:5], EVENTS[5:]):
        export = MetricsExport(tmp_path, _cfg())
        export.add_all(half)
        export.close()
    assert [r["updates"] for r in _rows(tmp_path / "metrics.csv")] == ["40", "100"]


def test_eval_updates_is_the_furthest_shard_not_the_sum():
    assert eval_updates({"updates": 79, "versions": [40, 39]}) == 40
    assert eval_updates({"updates": 7}) == 7  # all-reduce snapshots carry one count


@pytest.mark.parametrize("sets, per_update", [(["consistency.mode=asp"], 16), (["consistency.mode=ssp"], 16),
                                              (["consistency.mode=bsp"], 64),
                                              (["consistency.mode=bsp", "consistency.backup_workers=1"], 48),
                                              (["consistency.mode=allreduce"], 64)])
def test_examples_per_update_follows_the_mode(sets, per_update):
    assert examples_per_update(_cfg(*sets)) == per_update


def test_tensorboard_scalars_and_histograms_are_readable(tmp_path):
    export = MetricsExport(tmp_path, _cfg("logging.tensorboard=true"), t0=1000.0)
    export.add_all(EVENTS)
    export.close()
    # imported here, not at the top, where every xdist worker paid for it at collection
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()
    assert {"test/accuracy", "test/loss", "train/loss", "staleness/mean", "staleness/max", "clock_gap/max",
            "by_examples/test_accuracy"} <= set(tags["scalars"])
    assert {"staleness", "clock_gap"} <= set(tags["histograms"])
    accuracy = acc.Scalars("test/accuracy")
    assert [(s.step, s.value, s.wall_time) for s in accuracy] == [(40, 0.5, 1001.0), (100, 0.75, 1003.0)]
    assert [s.step for s in acc.Scalars("by_examples/test_accuracy")] == [640, 1600]
    assert [s.value for s in acc.Scalars("staleness/max")] == [2.0, 5.0]
    hist = acc.Histograms("staleness")[-1].histogram_value
    assert (hist.num, hist.max, list(hist.bucket)) == (141, 5, [10, 41, 30, 60])
