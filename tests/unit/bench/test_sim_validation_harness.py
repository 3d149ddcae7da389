"""benchmarks/sim-validation: what counts as a hit, what a run's quantities are, and
when a pairwise verdict agrees. A claim that cannot fail ("not reached" on both
sides) is not counted; a staleness of 0 must be predicted exactly."""
import json
import math

import pytest
from conftest import load_script

tables = load_script("benchmarks/sim-validation/tables.py")
runs = load_script("benchmarks/sim-validation/testbed_runs.py")


def test_a_hit_is_within_fifteen_percent_and_not_reached_on_both_sides_is_not_counted():
    assert tables._within(10.0, 11.5) == "yes" and tables._within(10.0, 8.5) == "yes"
    assert tables._within(10.0, 11.6) == "no" and tables._within(10.0, 8.4) == "no"
    assert tables._within(math.inf, math.inf) == "not counted"
    assert tables._within(math.inf, 3.0) == "no" and tables._within(3.0, math.inf) == "no"
    assert tables._within(0.0, 0.0) == "yes" and tables._within(0.0, 1.0) == "no"
    assert tables._median([2.0, None, 1.0]) == 2.0 and tables._median([None, None, 1.0]) == math.inf


def _run_dir(tmp_path, steps, hist, **summary):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "summary.json").write_text(json.dumps({"updates_per_s": 10.0, "wall_time_s": 6.0,
                                                       "time_to_target_s": None, "staleness_hist": hist, **summary}))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"event": "step", **s}) + "\n" for s in steps))
    return tmp_path


def test_quantities_take_pull_waits_from_pushing_steps_and_staleness_quantiles_from_the_histogram(tmp_path):
    # Local updates: the clock moves every 2nd step; the steps between push nothing (comm_s ~0).
    steps = [{"t": 0.1 * i, "rank": 0, "clock": (i + 1) // 2, "comm_s": 0.005 if i % 2 else 0.0001}
             for i in range(10)]
    q = runs.quantities(_run_dir(tmp_path / "a", steps, {"0": 1, "3": 97, "9": 2}), "local:4")
    assert q["pull_wait_p50_s"] == 0.005
    assert (q["staleness_p50"], q["staleness_p99"], q["staleness_max"]) == (3.0, 9.0, 9.0)
    assert q["time_to_target_s"] is None and q["wall_time_s"] == 6.0
    bsp = runs.quantities(_run_dir(tmp_path / "b", steps, {"0": 100}), "bsp+backup:1")
    assert "staleness_p50" not in bsp  # 0 by construction under bsp: not a prediction


def _record(side, cell, seed, wall, target):
    return {"side": side, "cell": cell.name, "workers": cell.workers, "mode": cell.mode, "case": cell.case,
            "net": cell.net, "seed": seed, "quantities": {"wall_time_s": wall, "time_to_target_s": target}}


def test_a_verdict_agrees_only_when_both_sides_reach_the_same_outcome():
    a, b = runs.Cell(4, "bsp", "none", "loopback"), runs.Cell(4, "asp", "none", "loopback")
    # Three seeds a side: the fewest a decisive verdict takes.
    figures = {("real", a): ([6.0, 6.1, 6.05], [3.0, 3.1, 3.05]), ("real", b): ([4.0, 4.1, 4.05], [3.0, 3.2, 3.1]),
               ("sim", a): ([5.0, 5.0, 5.0], [None, None, None]), ("sim", b): ([4.0, 4.0, 4.0], [2.0, 2.0, 2.0])}
    measured = [_record(side, cell, seed, walls[seed], targets[seed])
                for (side, cell), (walls, targets) in figures.items() for seed in (0, 1, 2)]
    cells = tables._cells(measured)
    got = {v["quantity"]: v for v in tables._verdicts(cells, measured)}
    assert (got["wall_time_s"]["real"], got["wall_time_s"]["simulated"], got["wall_time_s"]["agree"]) == \
        ("slower", "slower", "yes")
    assert (got["time_to_target_s"]["real"], got["time_to_target_s"]["simulated"],
            got["time_to_target_s"]["agree"]) == ("tied", "slower", "no")  # 3.05 vs 3.1: inside ±10%; the sim never reached it
    assert got["wall_time_s"]["stated_only"] == ""  # no "stated" side measured: no verdict made up for it


def test_each_case_and_mode_is_the_config_it_names():
    cell = runs.Cell(8, "bsp+backup:1", "straggler", "shaped")
    assert runs.overrides(cell, 1) == ["cluster.workers=8", "run.seed=1", "consistency.mode=bsp",
                                       "consistency.backup_workers=1", "workers.slowdown={7: 4.0}"]
    shape = runs.LinkShape(rate_mbit=100)
    assert runs.sim_overrides(cell, shape) == ["sim.bandwidth_gbps=0.1"]
    assert runs.sim_overrides(runs.Cell(8, "asp", "none", "loopback"), shape) == []
    # The host's per-message cost: as fitted on loopback; on the shaped net a stated link delay adds to it.
    host = runs.HostCost(request_us=900.0, latency_us=120.0)
    assert runs.sim_overrides(runs.Cell(8, "asp", "none", "loopback"), shape, host) == \
        ["sim.request_us=900.0", "sim.latency_us=120.0"]
    assert runs.sim_overrides(cell, runs.LinkShape(rate_mbit=100, latency_ms=0.5), host) == \
        ["sim.request_us=900.0", "sim.bandwidth_gbps=0.1", "sim.latency_us=620.0"]


def test_a_cell_given_on_the_command_line_is_w_mode_case_net_or_one_line_of_error():
    validate = load_script("benchmarks/sim-validation/validate.py")
    assert validate._cell("8/bsp+backup:1/straggler/shaped") == runs.Cell(8, "bsp+backup:1", "straggler", "shaped")
    with pytest.raises(SystemExit, match="--cells: '8/bsp/slow/loopback' is not W/mode/case/net"):
        validate._cell("8/bsp/slow/loopback")
