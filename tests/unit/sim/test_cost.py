"""`psgd bench sim --json`: both gradient paths, and per_step_over_floor from the figures it prints."""
import json

import pytest

from psgd.cli import main


def test_bench_sim_json_reports_per_step_over_floor_for_both_paths(capsys):
    code = main(["bench", "sim", "--workers", "4", "--steps", "32", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    (point,) = out["points"]
    batched, exact, floor = point["batched"], point["one_by_one"], out["floor"]
    assert batched["batched"] and batched["fallback"] is None and not exact["batched"]
    assert batched["worker_steps"] == exact["worker_steps"] == 32
    assert batched["per_step_s"] == pytest.approx(batched["total_s"] / 32, rel=1e-3)
    assert out["per_step_over_floor"] == point["per_step_over_floor"] == pytest.approx(
        batched["per_step_s"] / floor["per_step_s"], rel=1e-3)
    assert point["one_by_one_per_step_over_floor"] == pytest.approx(exact["per_step_s"] / floor["per_step_s"],
                                                                    rel=1e-3)


def test_bench_sim_refuses_bad_worker_counts_in_one_line(capsys):
    assert main(["bench", "sim", "--workers", "0", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--workers" in err
