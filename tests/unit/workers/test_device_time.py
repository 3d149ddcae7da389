"""workers.device_ms (workers/device_time.py): each step lasts at least its stated
device time, drawn from the variability the simulator draws from, in a hand-written
loop through psgd.Optimizer as in the built-in worker."""
import dataclasses
import time

import pytest
import torch
from torch import nn

import psgd
from psgd.config import ConfigError, load_config
from psgd.core.step_time import ComputeJitter
from psgd.sim.compute import ComputeSource, resolve_compute
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel
from psgd.workers.device_time import DeviceClock


def clock(device_ms=20.0, jitter=0.5, seed=3, rank=1):
    cfg = load_config(None, [f"workers.device_ms={device_ms}", f"sim.compute_jitter={jitter}", f"run.seed={seed}",
                             "cluster.workers=4"])
    return DeviceClock.from_config(cfg, rank)


def test_no_device_time_no_clock():
    assert DeviceClock.from_config(load_config(None, []), 0) is None


def test_a_bad_device_time_is_refused_with_its_key():
    for bad in ("0", "-5", ".inf", "fast"):
        with pytest.raises(ConfigError, match="workers.device_ms"):
            load_config(None, [f"workers.device_ms={bad}"])


def test_step_times_are_device_ms_times_the_simulators_factor_and_repeat():
    c = clock()
    j = ComputeJitter(0.5, seed=3)
    assert [c.step_s(k) for k in range(50)] == [0.020 * j.factor(1, k) for k in range(50)]
    assert [clock().step_s(k) for k in range(50)] == [c.step_s(k) for k in range(50)]
    assert clock(seed=4).step_s(0) != c.step_s(0) and clock(rank=2).step_s(0) != c.step_s(0)
    assert {clock(jitter=0.0).step_s(k) for k in range(50)} == {0.020}


def test_the_simulator_computes_each_step_for_the_device_time_a_real_worker_waits():
    cfg = load_config(None, ["task.model=linear", "task.dataset=synthetic", "task.batch_size=8", "cluster.servers=1",
                             "cluster.workers=3", "consistency.mode=asp", "train.steps_per_worker=40",
                             "train.max_time_s=1e9", "eval.enabled=false", "workers.device_ms=25",
                             "sim.compute_jitter=0.4", "sim.worker_spread=0.3", "run.seed=5"])
    ex = Executor(cfg)
    compute = resolve_compute(cfg, ex.task)  # the stated device time, nothing measured or counted
    assert (compute.compute_ms, compute.source) == (25.0, ComputeSource.DEVICE_MS)
    events = []
    Engine(ex, TimeModel.from_config(cfg.sim, compute.compute_ms), steps_per_worker=40, max_time_s=1e9,
           eval_every_s=None, emit=events.append).run()
    for rank in range(3):
        real = DeviceClock.from_config(cfg, rank)
        simulated = [e["compute_s"] for e in events if e["event"] == "step" and e["rank"] == rank]
        assert simulated == [round(real.step_s(k), 9) for k in range(40)]


def test_hold_waits_out_the_rest_of_the_device_time():
    c = clock(jitter=0.0, device_ms=30.0)
    waits = []
    started = time.perf_counter()
    took = c.hold(started, 0, wait=lambda s: waits.append(s) or time.sleep(s))
    assert len(waits) == 1 and 0 < waits[0] <= 0.030
    assert took >= 0.030


def test_a_step_that_computed_longer_than_its_device_time_does_not_wait():
    c = clock(jitter=0.0, device_ms=5.0)
    waits = []
    took = c.hold(time.perf_counter() - 0.050, 0, wait=waits.append)
    assert waits == [] and took >= 0.050


@pytest.fixture
def job(shards):
    def make(model, *sets):
        base = load_config(None, ["cluster.servers=1", "cluster.workers=1", "consistency.mode=asp",
                                  "workers.device=cpu", "checkpoint.enabled=false", *sets])
        served = shards(base, model)
        return dataclasses.replace(base, cluster=dataclasses.replace(base.cluster, servers=served.addresses))
    return make


def _steps(opt, model, n, zero_grad=True):
    """n steps of a plain loop; each one's seconds from its beginning to step()'s return."""
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        if zero_grad:
            opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        took.append(time.perf_counter() - t0)
    return took


@pytest.mark.timeout(60)
def test_a_plain_loop_through_psgd_optimizer_takes_each_steps_device_time(job):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    cfg = job(model, "workers.device_ms=30", "sim.compute_jitter=0.5")
    device = DeviceClock.from_config(cfg, 0)
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        took = _steps(opt, model, 8)
        assert opt.clock == 8
    assert all(t >= device.step_s(k) for k, t in enumerate(took)), (took, [device.step_s(k) for k in range(8)])
    # Without zero_grad a step begins when the previous one returned: each still lasts its device time.
    model2 = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    with psgd.Optimizer(model2, job(model2, "workers.device_ms=30", "sim.compute_jitter=0.5"), rank=0) as opt:
        opt.zero_grad()
        took = _steps(opt, model2, 4, zero_grad=False)
    assert all(t >= device.step_s(k) for k, t in enumerate(took))


@pytest.mark.timeout(60)
def test_hold_device_in_the_loop_returns_the_padded_compute_and_step_does_not_wait_again(job):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    cfg = job(model, "workers.device_ms=40")
    with psgd.Optimizer(model, cfg, rank=0) as opt:
        held = []
        hold = opt.device_clock.hold
        opt.device_clock.hold = lambda *a, **k: held.append(a[1]) or hold(*a, **k)
        for _ in range(3):
            t0 = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(4, 5)), torch.tensor([0, 1, 2, 0])).backward()
            assert opt.hold_device(t0) >= 0.040
            opt.step()
        opt.zero_grad()
        opt.step()  # a step the loop did not hold: step() holds it
    assert held == [0, 1, 2, 3]  # one wait per step, for its own step index
