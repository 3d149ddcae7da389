"""What the staleness tuner fixes before comparing bounds: each bound's rate grid,
the evaluation spacing, and the simulated runs' shared step time."""
import math

import pytest

from psgd.bench.tune_setup import (
    EVALS_PER_SPAN,
    EVALS_PER_TARGET,
    GRID_FACTORS,
    eval_spacing_s,
    rate_grid,
    sim_overrides,
)
from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.wire.codecs import CODECS


def test_the_rate_grid_is_the_configured_rate_times_the_factors_or_the_given_rates():
    grid = rate_grid(0.1)
    assert grid == sorted(0.1 * f for f in GRID_FACTORS) and 0.1 in grid
    assert rate_grid(0.1, [0.3, 0.1, 0.3]) == [0.1, 0.3]


def test_evaluations_are_spaced_from_the_expected_time_to_target():
    assert eval_spacing_s(2.0) == pytest.approx(2.0 / EVALS_PER_TARGET)
    assert eval_spacing_s(math.inf) is None and eval_spacing_s(0.0) is None


def test_simulated_runs_share_the_step_time_stop_at_target_and_evaluate_densely():
    real = load_config(None, ["cluster.workers=64"])
    assert sim_overrides(real, lambda: (1.0, make_layout([("w", (10,))], 1))) == []
    cfg = load_config(None, ["cluster.workers=64", "cluster.launcher=sim", "cluster.servers=2",
                             "train.steps_per_worker=500", "sim.request_us=30", "eval.every_s=1.0"])
    sets = sim_overrides(cfg, lambda: (0.1, make_layout([("w", (4810,))], 2)))
    assert sets[:2] == ["sim.compute_ms=0.1", "train.stop_at_target=true"]
    # 64 pushes of 2405 floats per round at 30 us + apply beat the 0.1 ms step: the shard sets the pace.
    service = 30e-6 + 4 * 2405 / (cfg.sim.apply_gbytes_per_s * 1e9)
    every = float(sets[2].split("=")[1])
    assert math.isclose(every, 500 * 64 * service / EVALS_PER_SPAN, rel_tol=1e-5)


def test_the_shards_pace_is_the_slowest_shards_with_its_own_codecs():
    """Shard 0 pushes 1205 int8 values; shard 1, 1195 int8 and 10 fp32 (a tensor below small_below):
    the round is paced by shard 0's decode at int8's own rate, not by fp32 for every shard."""
    layout = make_layout([("w", (2400,)), ("b", (10,))], 2)
    cfg = load_config(None, ["cluster.workers=64", "cluster.launcher=sim", "cluster.servers=2",
                             "train.steps_per_worker=500", "sim.request_us=30", "eval.every_s=1.0",
                             "wire.compression={default: int8, small: none, small_below: 100, choose_by: tensor}"])
    sets = sim_overrides(cfg, lambda: (0.1, layout))
    decode = CODECS["int8"].cost.decode_gbytes_per_s * 1e9
    service = 30e-6 + 4 * 1205 / decode + 4 * 1205 / (cfg.sim.apply_gbytes_per_s * 1e9)
    assert layout.shard_sizes == (1205, 1205)
    assert math.isclose(float(sets[2].split("=")[1]), 500 * 64 * service / EVALS_PER_SPAN, rel_tol=1e-5)
