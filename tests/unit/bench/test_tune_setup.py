"""What the staleness tuner fixes before comparing bounds: the learning rate the
loosest bound trains at, and the simulated runs' shared step time and evaluations."""
import math

from psgd.bench.tune_setup import EVALS_PER_SPAN, MAX_HALVINGS, check_rate, sim_overrides, trained
from psgd.config import load_config


def _evals(*losses):
    return [{"t": i, "test_loss": x} for i, x in enumerate(losses)]


def test_trained_needs_finite_losses_falling_by_a_tenth():
    assert trained(_evals(2.31, 1.0, 0.25))
    assert not trained(_evals(2.31, 2.30))          # a collapsed model: uniform predictions
    assert not trained(_evals(2.31, math.nan))
    assert not trained(_evals(2.31))                # one evaluation says nothing
    assert trained(_evals(2.0, 1.8)) and not trained(_evals(2.0, 1.81))


def test_the_rate_is_halved_until_the_probe_trains():
    tried = []

    def probe(lr):
        tried.append(lr)
        return object(), _evals(2.3, 0.2 if lr <= 0.025 else 2.3)

    check = check_rate(0.1, probe)
    assert tried == [0.1, 0.05, 0.025] and check.lr == 0.025 and check.changed
    assert "0.025, the configured rate halved" in check.text(8)


def test_a_rate_that_trains_is_kept_and_none_that_trains_falls_back_to_the_configured_one():
    check = check_rate(0.1, lambda lr: (object(), _evals(2.3, 0.5)))
    assert check.lr == 0.1 and not check.changed
    never = check_rate(0.1, lambda lr: (None, []))
    assert never.lr == 0.1 and len(never.tried) == MAX_HALVINGS + 1 and "no rate tried" in never.text(8)


def test_simulated_runs_share_the_step_time_stop_at_target_and_evaluate_densely():
    real = load_config(None, ["cluster.workers=64"])
    assert sim_overrides(real, lambda: (1.0, 10)) == []
    cfg = load_config(None, ["cluster.workers=64", "cluster.launcher=sim", "cluster.servers=2",
                             "train.steps_per_worker=500", "sim.request_us=30", "eval.every_s=1.0"])
    sets = sim_overrides(cfg, lambda: (0.1, 4810))
    assert sets[:2] == ["sim.compute_ms=0.1", "train.stop_at_target=true"]
    # 64 pushes of 2405 floats per round at 30 us + apply beat the 0.1 ms step: the shard sets the pace.
    service = 30e-6 + 4 * 2405 / (cfg.sim.apply_gbytes_per_s * 1e9)
    every = float(sets[2].split("=")[1])
    assert math.isclose(every, 500 * 64 * service / EVALS_PER_SPAN, rel_tol=1e-5)
