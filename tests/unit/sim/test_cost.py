"""`psgd bench sim --json`: both gradient paths, and per_step_over_floor from the figures it prints."""
import json

import pytest

from psgd.cli import main
from psgd.config import load_config
from psgd.sim.cost import Floor, measure_gemm_peak
from psgd.sim.flops import step_flops
from psgd.tasks import load_task


def test_bench_sim_json_reports_serial_batched_and_chosen_over_the_floor(capsys):
    code = main(["bench", "sim", "--workers", "4", "--steps", "32", "--peak-size", "64", "--peak-seconds", "0.02",
                 "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gemm_peak"]["size"] == 64 and out["gemm_peak"]["threads"] == 1 and out["gemm_peak"]["gflops"] > 0
    (model,) = out["models"]
    (point,) = model["points"]
    batched, serial, floor = point["batched"], point["serial"], model["floor"]
    assert batched["batched"] and batched["fallback"] is None and not serial["batched"]
    assert batched["worker_steps"] == serial["worker_steps"] == 32
    assert batched["per_step_s"] == pytest.approx(batched["total_s"] / 32, rel=1e-3)
    for key in ("serial", "batched"):
        assert point[f"{key}_over_floor"] == pytest.approx(point[key]["per_step_s"] / floor["per_step_s"], rel=1e-3)
    # the chosen path is the one the probe chose, and its figures are that path's
    assert point["chosen"] == point["probe"]["chosen"]
    chosen = point[point["chosen"]]["per_step_s"]
    assert point["chosen_over_floor"] == point[f"{point['chosen']}_over_floor"]
    assert point["chosen_over_faster"] == pytest.approx(
        chosen / min(serial["per_step_s"], batched["per_step_s"]), rel=1e-3)
    # the bound any batching faces: the floor's counted FLOPs per CPU second over the core's matrix-product peak
    assert floor["flops_per_step"] == step_flops(load_config(None), load_task(load_config(None), None, ("train",)))
    assert floor["gemm_peak_fraction"] == pytest.approx(
        floor["flops_per_step"] / floor["per_step_s"] / (out["gemm_peak"]["gflops"] * 1e9), rel=1e-2)


def test_a_floor_at_half_the_peak_bounds_any_path_at_half_of_it():
    peak = measure_gemm_peak((32, 64), 0.02)
    assert 0 < peak < float("inf")
    floor = Floor(steps=1, per_step_s=1e9 / (peak / 2), overhead=0.0, flops_per_step=10 ** 9, gemm_peak_flops=peak)
    assert floor.gemm_peak_fraction == pytest.approx(0.5)


def test_bench_sim_refuses_bad_worker_counts_in_one_line(capsys):
    assert main(["bench", "sim", "--workers", "0", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--workers" in err


def test_bench_sim_refuses_a_config_with_the_suite_in_one_line(capsys):
    assert main(["bench", "sim", "configs/quickstart.yaml", "--suite", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--suite" in err
