"""What the bench's plots draw (psgd.bench.plots): identical modes named, each curve reaching its end mark."""
from pathlib import Path

import numpy as np

from psgd.bench.plots import curve_on_grid, identical_to, plot_runs
from psgd.bench.run_data import RunData


def test_modes_whose_every_seed_repeats_an_earlier_one_are_named_identical():
    a = [([0.0, 1.0], [0.1, 0.9]), ([0.0, 1.0], [0.2, 0.8])]
    b = [([0.0, 1.0], [0.1, 0.9]), ([0.0, 1.0], [0.2, 0.8])]
    c = [([0.0, 1.0], [0.1, 0.9]), ([0.0, 1.1], [0.2, 0.8])]  # one seed differs
    assert identical_to({"ssp:1": a, "ssp:2": b, "ssp:0": c, "ssp:8": list(b)}) == {"ssp:2": "ssp:1", "ssp:8": "ssp:1"}


def test_a_grid_holding_the_run_end_ends_the_curve_on_the_last_value():
    xs, ys = [0.0, 0.4, 0.95], [0.1, 0.5, 0.9]
    plain = np.linspace(0.0, 1.0, 11)
    assert curve_on_grid(xs, ys, plain)[9] == 0.5  # 0.9 on the grid: still the previous evaluation, then nothing
    grid = np.union1d(plain, [xs[-1]])
    drawn = curve_on_grid(xs, ys, grid)
    assert drawn[grid == 0.95][0] == 0.9 and np.isnan(drawn[grid > 0.95]).all()


def test_simulated_runs_are_plotted_against_simulated_time(tmp_path, monkeypatch):
    labels = []
    import psgd.bench.plots as plots
    monkeypatch.setattr(plots, "_finish", lambda fig, ax, x_label, *a: labels.append(x_label))
    evals = [{"event": "eval", "t": t, "accuracy": a, "loss": 1 - a} for t, a in ((0.0, 0.1), (0.5, 0.9))]
    steps = [{"event": "step", "t": 0.5, "loss": 0.5}]
    run = RunData(Path(tmp_path), "asp", {"seed": 0}, evals, steps,
                  {"cluster": {"launcher": "sim", "workers": 1}, "consistency": {"mode": "asp"}})
    plot_runs([run], tmp_path)
    assert labels == ["simulated time since start (s)", "training examples behind the applied updates",
                      "simulated time since start (s)"]
