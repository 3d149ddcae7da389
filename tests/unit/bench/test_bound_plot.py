"""The bound-over-time plot's series, from synthetic events."""
import json

from psgd.bench.bound_plot import bound_series, has_setting_changes, initial_bound, plot_bounds


def ev(event, t, **f):
    return {"event": event, "t": t, "role": "x", "index": f.pop("index", 0), **f}


EVENTS = [
    ev("step", 0.1, clock=1, gap=0), ev("step", 0.2, clock=2, gap=0),
    ev("setting_change", 0.25, effective_clock=4, setting={"mode": "ssp", "bound": 3}),
    ev("setting_change", 0.25, index=1, effective_clock=4, setting={"mode": "ssp", "bound": 3}),
    ev("step", 0.3, clock=3, gap=0), ev("step", 0.4, clock=4, gap=2), ev("step", 0.5, clock=6, gap=3),
    ev("setting_change", 0.55, effective_clock=7, setting={"mode": "asp", "bound": 3}),
    ev("step", 0.6, clock=7, gap=5),
    ev("setting_change", 0.7, effective_clock=99, setting={"mode": "ssp", "bound": 1}),  # never reached
]


def test_series_places_each_change_at_the_first_step_it_governs():
    points, gaps = bound_series(EVENTS, initial=0)
    assert points == [(0.0, 0), (0.4, 3), (0.6, None)]
    assert gaps == [(0.1, 0), (0.2, 0), (0.3, 0), (0.4, 2), (0.5, 3), (0.6, 5)]


def test_plot_is_written(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(e) for e in EVENTS) + "\n")
    assert has_setting_changes(run)
    (run / "config.yaml").write_text("consistency: {mode: ssp, staleness: auto, staleness_min: 2}\n")
    assert initial_bound(run) == 2
    out = plot_bounds([("ssp:auto seed 0", run, None)], tmp_path / "b.png", title="t")
    assert out.stat().st_size > 1000
