"""The time model, checked against its own formulas (psgd.sim.time_model)."""
import pytest

from psgd.config import load_config
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel, ring_allreduce_s

STEPS = 20


def run(workers, servers=1, mode="asp", extra=(), engine_out=None, **sim):
    sets = [*extra, "task.model=linear", "task.dataset=synthetic", "task.batch_size=8", f"cluster.servers={servers}",
            f"cluster.workers={workers}", f"consistency.mode={mode}", f"train.steps_per_worker={STEPS}",
            "train.max_time_s=1e9", "eval.enabled=false"]
    sets += [f"sim.{k}={v}" for k, v in sim.items()]
    cfg = load_config(None, sets)
    ex = Executor(cfg)
    tm = TimeModel.from_config(cfg.sim, cfg.sim.compute_ms)
    events = []
    engine = Engine(ex, tm, steps_per_worker=STEPS, max_time_s=cfg.train.max_time_s, eval_every_s=None,
                    emit=events.append)
    result = engine.run()
    if engine_out is not None:
        engine_out.append(engine)
    return ex, tm, result, events


def test_one_worker_step_is_compute_plus_both_transfers_plus_service():
    ex, tm, result, _ = run(1, compute_ms=2.0, latency_us=50, bandwidth_gbps=0.01, request_us=40, apply_gbytes_per_s=1)
    nbytes = 4 * ex.layout.shard_sizes[0]  # none (fp32) both ways
    step = tm.compute_s + 2 * (tm.transfer_s(nbytes) + tm.latency_s) + tm.service_s(ex.layout.shard_sizes[0])
    assert result.end_s == pytest.approx(STEPS * step, rel=1e-12)


def test_a_shards_link_shared_by_many_workers_saturates_at_its_bandwidth():
    # Transfers dominate: compute, latency and service are (almost) free.
    _, tm, result, _ = run(16, compute_ms=1e-6, latency_us=0, bandwidth_gbps=0.01, request_us=0, apply_gbytes_per_s=1e6)
    ex1, tm1, one, _ = run(1, compute_ms=1e-6, latency_us=0, bandwidth_gbps=0.01, request_us=0, apply_gbytes_per_s=1e6)
    nbytes = 4 * ex1.layout.shard_sizes[0]
    link_limit = 1 / tm.transfer_s(nbytes)  # pushes/s one uplink carries
    rate16 = 16 * STEPS / result.end_s
    rate1 = STEPS / one.end_s
    assert rate16 <= link_limit * (1 + 1e-9)
    assert rate16 >= 0.9 * link_limit   # saturated (the pipeline's fill and drain are the rest)
    assert rate1 == pytest.approx(link_limit / 2, rel=1e-3)  # alone: its push and its reply in turn


def test_a_shard_serves_one_request_at_a_time():
    ex, tm, result, _ = run(8, compute_ms=1e-6, latency_us=0, bandwidth_gbps=1e6, request_us=500, apply_gbytes_per_s=1)
    service = tm.service_s(ex.layout.shard_sizes[0])
    assert result.end_s >= 8 * STEPS * service
    assert result.end_s == pytest.approx(8 * STEPS * service, rel=0.02)


def test_a_lone_worker_wakes_its_shard_every_time():
    common = dict(compute_ms=2.0, latency_us=50, bandwidth_gbps=0.01, request_us=40, apply_gbytes_per_s=1)
    _, _, plain, _ = run(1, **common)
    engines = []
    ex, tm, woken, _ = run(1, engine_out=engines, wake_us=300, **common)
    assert tm.service_s(5, idle=True) == pytest.approx(tm.service_s(5) + 300e-6, abs=1e-15)
    assert engines[0].wakes == engines[0].arrivals == [STEPS]
    assert woken.end_s == pytest.approx(plain.end_s + STEPS * 300e-6, rel=1e-12)


def test_requests_queued_behind_another_pay_no_wake():
    # 8 workers with (almost) no compute keep the shard busy: a request that finds another
    # being served waits and is served back to back, without a wake. The busy shard picks
    # among waiting pushes by a seeded draw, so a worker can be left to finish its last steps
    # alone: each of those finds the shard idle (and wakes it), which the count allows for.
    engines = []
    ex, tm, result, _ = run(8, engine_out=engines, compute_ms=1e-6, latency_us=0, bandwidth_gbps=1e6,
                            request_us=500, apply_gbytes_per_s=1, wake_us=2000)
    service = tm.service_s(ex.layout.shard_sizes[0])
    engine = engines[0]
    assert engine.arrivals == [8 * STEPS] and 1 <= engine.wakes[0] <= STEPS
    assert engine.served_s[0] == pytest.approx(8 * STEPS * service + engine.wakes[0] * tm.wake_s, rel=1e-9)
    assert result.end_s == pytest.approx(8 * STEPS * service + engine.wakes[0] * tm.wake_s, rel=0.02)


def test_a_straggler_slows_only_itself():
    common = dict(compute_ms=10.0, latency_us=1, bandwidth_gbps=100, request_us=1, apply_gbytes_per_s=100)
    _, _, _, plain = run(4, **common)
    _, tm, _, events = run(4, extra=["workers.slowdown={1: 4.0}"], **common)

    def step_s(evs, rank):
        return [e["step_s"] for e in evs if e["event"] == "step" and e["rank"] == rank]

    # Rank 1 computes 4x as long; the others' steps are as without it (no CPU is freed in simulation).
    for rank in (0, 2, 3):
        assert max(step_s(events, rank)) == pytest.approx(max(step_s(plain, rank)), rel=0.01)
    assert min(step_s(events, 1)) >= 4 * tm.compute_s


def test_ring_allreduce_time():
    nbytes, w, lat, bw = 4_000_000, 8, 2e-5, 25e9 / 8
    assert ring_allreduce_s(nbytes, w, lat, bw) == pytest.approx(2 * (w - 1) * (lat + nbytes / w / bw))
    assert ring_allreduce_s(nbytes, 1, lat, bw) == 0.0
