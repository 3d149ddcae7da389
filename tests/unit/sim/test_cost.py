"""`psgd bench sim --json`: both gradient paths, and per_step_over_floor from the figures it prints."""
import json

import pytest

from psgd.cli import main
from psgd.config import load_config
from psgd.sim.cost import Floor, measure_gemm_peak
from psgd.sim.flops import step_flops
from psgd.tasks import load_task


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
    # the bound any batching faces: the floor's counted FLOPs per CPU second over the core's matrix-product peak
    assert floor["flops_per_step"] == step_flops(load_config(None), load_task(load_config(None), None, ("train",)))
    assert floor["gemm_peak_fraction"] == pytest.approx(
        floor["flops_per_step"] / floor["per_step_s"] / (floor["gemm_peak_gflops"] * 1e9), rel=1e-2)


def test_a_floor_at_half_the_peak_bounds_any_path_at_half_of_it():
    peak = measure_gemm_peak((32, 64), 0.02)
    assert 0 < peak < float("inf")
    floor = Floor(steps=1, per_step_s=1e9 / (peak / 2), overhead=0.0, flops_per_step=10 ** 9, gemm_peak_flops=peak)
    assert floor.gemm_peak_fraction == pytest.approx(0.5)


def test_bench_sim_refuses_bad_worker_counts_in_one_line(capsys):
    assert main(["bench", "sim", "--workers", "0", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--workers" in err
