"""Per-step compute jitter (psgd.core.step_time): a pure function of (seed, rank, step),
lognormal of mean 1 and the given CV, and on the engine it multiplies each step's
compute, composes with a straggler, and spreads ASP's clocks."""
import functools

import numpy as np
import pytest

from psgd.config import ConfigError, load_config
from psgd.core.step_time import ComputeJitter, StepVariability, lognormal_sigma, step_variability
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel


def test_a_factor_depends_on_seed_rank_and_step_only():
    a, b = ComputeJitter(0.4, seed=7), ComputeJitter(0.4, seed=7)
    keys = [(r, s) for r in range(3) for s in range(0, 3000, 7)]
    forward = [a.factor(r, s) for r, s in keys]
    backward = [b.factor(r, s) for r, s in reversed(keys)][::-1]  # another order, across block boundaries
    assert forward == backward
    assert ComputeJitter(0.4, seed=8).factor(0, 0) != a.factor(0, 0)
    assert a.factor(1, 5) != a.factor(2, 5) and a.factor(1, 5) != a.factor(1, 6)


def test_no_jitter_is_exactly_one():
    j = ComputeJitter(0.0, seed=3)
    assert {j.factor(r, s) for r in range(4) for s in range(2000)} == {1.0}


@pytest.mark.parametrize("cv", [0.2, 0.5, 1.0])
def test_the_distribution_has_mean_one_and_the_given_cv(cv):
    j = ComputeJitter(cv, seed=0)
    x = np.array([j.factor(r, s) for r in range(64) for s in range(4096)])  # 262144 draws
    # Tolerances: several standard errors of each estimate at this n (the CV's
    # grows with the lognormal's tail); a mean-1 slip (mu = 0) would be exp(sigma^2/2) - 1 off.
    assert x.mean() == pytest.approx(1.0, abs=0.01)
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.05)
    assert np.log(x).std() == pytest.approx(lognormal_sigma(cv), rel=0.01)
    assert (x > 0).all()


def test_a_negative_or_infinite_cv_is_refused():
    with pytest.raises(ValueError):
        ComputeJitter(-0.1, 0)
    with pytest.raises(ConfigError, match="compute_jitter"):
        load_config(None, ["sim.compute_jitter=-1"])
    with pytest.raises(ConfigError, match="compute_jitter"):
        load_config(None, ["sim.compute_jitter=.inf"])


STEPS = 120


def run(jitter, workers=4, extra=(), seed=0):
    cfg = load_config(None, [*extra, "task.model=linear", "task.dataset=synthetic", "task.batch_size=8",
                             "cluster.servers=1", f"cluster.workers={workers}", "consistency.mode=asp",
                             f"train.steps_per_worker={STEPS}", "train.max_time_s=1e9", "eval.enabled=false",
                             f"run.seed={seed}", "sim.compute_ms=10", "sim.latency_us=20", "sim.request_us=30",
                             f"sim.compute_jitter={jitter}"])
    ex = Executor(cfg)
    events = []
    Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms), steps_per_worker=STEPS,
           max_time_s=cfg.train.max_time_s, eval_every_s=None, emit=events.append).run()
    return ex, [e for e in events if e["event"] == "step"]


# One simulated run per argument list for the tests that only read it (each costs ~0.5 s of
# torch steps); the same spelling (seed by keyword) shares one. The repeat below calls `run`.
shared_run = functools.cache(run)


def test_each_step_computes_for_compute_ms_times_its_factor_and_runs_repeat_exactly():
    ex, steps = shared_run(0.5, seed=0)  # the staleness test reads this run too
    j = ComputeJitter(0.5, seed=0)
    for rank in range(4):
        mine = [e for e in steps if e["rank"] == rank]
        assert [e["compute_s"] for e in mine] == [round(0.010 * j.factor(rank, i), 9) for i in range(STEPS)]
    _, again = run(0.5)
    assert again == steps  # same config and seed: the same events, times and losses


def test_jitter_composes_with_a_straggler():
    _, steps = run(0.5, extra=["workers.slowdown={1: 4.0}"])
    for e in (e for e in steps if e["rank"] == 1):
        # the worker was busy 4x its own (jittered) compute before it sent
        assert e["step_s"] - e["comm_s"] == pytest.approx(4 * e["compute_s"], abs=1e-8)


def _staleness_max(ex) -> int:
    return max(int(k) for shard in ex.shards for k in shard.stats()["staleness_hist"])


def test_asp_staleness_max_grows_with_jitter():
    maxima = {cv: [_staleness_max(shared_run(cv, seed=s)[0]) for s in range(2)] for cv in (0.0, 0.2, 0.5)}
    # Without jitter 4 ASP workers stay in lock step: each push is 3 versions stale at most.
    assert maxima[0.0] == [3, 3]
    # With it the clocks drift apart, more the larger the spread (here 5-6 at CV 0.2, 10-11 at 0.5).
    assert min(maxima[0.2]) >= 5 and min(maxima[0.5]) > max(maxima[0.2]), maxima


def test_a_worker_spread_is_one_persistent_factor_per_rank_of_mean_one():
    v = step_variability(load_config(None, ["sim.worker_spread=0.3", "sim.compute_jitter=0.2"]).sim, seed=5)
    j = ComputeJitter(0.2, seed=5)
    for rank in range(4):
        assert [v.factor(rank, k) / j.factor(rank, k) for k in range(100)] == pytest.approx([v.speed(rank)] * 100)
    spread = StepVariability(0.0, 0.3, seed=5)
    speeds = np.array([spread.speed(r) for r in range(20000)])
    assert speeds.mean() == pytest.approx(1.0, abs=0.01) and speeds.std() == pytest.approx(0.3, rel=0.05)
    assert StepVariability(0.0, 0.3, seed=6).speed(0) != speeds[0]
    assert {StepVariability(0.0, 0.0, seed=5).factor(r, 3) for r in range(10)} == {1.0}
