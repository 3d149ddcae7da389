"""Every worker's link and every shard's link limit a message (psgd.sim.time_model):
units by what they count, one key for both sides unless a side is set, codec and
host<->device costs on the step."""
import pytest

from psgd.config import ConfigError, load_config
from psgd.sim import simulate
from psgd.sim.executor import Executor
from psgd.sim.time_model import TimeModel

STEPS = 10


def end_s(shards, *sets, workers=1, model="mlp"):
    cfg = load_config(None, [f"task.model={model}", "task.dataset=digits", "task.batch_size=16",
                             f"cluster.servers={shards}", f"cluster.workers={workers}", "consistency.mode=asp",
                             f"train.steps_per_worker={STEPS}", "train.max_time_s=1e9", "eval.enabled=false",
                             "sim.compute_ms=1", *sets])
    ex, result = simulate(cfg, cfg.sim.compute_ms)
    return result.end_s, ex, TimeModel.for_run(cfg, cfg.sim.compute_ms, ex.plans)


def test_acceptance_2_one_worker_on_8_shards_is_bounded_by_its_own_link():
    one, _, _ = end_s(1, "sim.bandwidth_gbps=0.1")
    eight, _, _ = end_s(8, "sim.bandwidth_gbps=0.1")
    assert one / eight <= 1.3
    # With only the shards' links slow, 8 shards carry 8 slices in parallel: the worker's own
    # link is what held the ratio down above.
    one_fast, _, _ = end_s(1, "sim.bandwidth_gbps=0.1", "sim.worker_bandwidth_gbps=1000")
    eight_fast, _, _ = end_s(8, "sim.bandwidth_gbps=0.1", "sim.worker_bandwidth_gbps=1000")
    compute_s = STEPS * 1e-3
    assert (one_fast - compute_s) / (eight_fast - compute_s) > 6


def test_one_key_sets_both_sides_and_a_side_key_overrides_it():
    sim = load_config(None, ["sim.bandwidth_gbps=0.1", "sim.latency_us=7"]).sim
    tm = TimeModel.from_config(sim, 1.0)
    assert tm.worker_link == tm.shard_link and tm.worker_link.bytes_per_s == 0.1e9 / 8  # bits on links
    assert tm.latency_s == pytest.approx(14e-6)  # a message crosses two links
    sim = load_config(None, ["sim.bandwidth_gbps=0.1", "sim.shard_bandwidth_gbps=40", "sim.worker_latency_us=3"]).sim
    tm = TimeModel.from_config(sim, 1.0)
    assert tm.shard_link.bytes_per_s == 40e9 / 8 and tm.worker_link.bytes_per_s == 0.1e9 / 8
    assert tm.worker_link.latency_s == 3e-6 and tm.shard_link.latency_s == 10e-6
    assert tm.apply_bytes_per_s == 15e9  # bytes for memory


def test_one_worker_step_is_both_links_the_service_and_the_codec():
    one, ex, tm = end_s(1, "wire.compression=fp16", "sim.encode_gbytes_per_s=0.5", "sim.decode_gbytes_per_s=0.25",
                        "sim.bandwidth_gbps=1", "sim.latency_us=30")
    n = ex.layout.shard_sizes[0]
    push = ex.workers[0].encoder.wire_bytes / STEPS  # fp16 on the wire
    step = (tm.compute_s + 4 * n / 0.5e9                            # compute, then encode
            + push / tm.bytes_per_s + 2 * 30e-6                     # up through both links
            + tm.request_s + 4 * n / 0.25e9 + 4 * n / tm.apply_bytes_per_s  # decode and apply
            + 4 * n / tm.bytes_per_s + 2 * 30e-6)                   # the fp32 reply back
    assert one == pytest.approx(STEPS * step, rel=1e-9)


def test_an_accelerator_copies_gradient_and_parameters_over_its_host_link():
    cpu, ex, _ = end_s(1, "sim.device=cpu")
    gpu, _, tm = end_s(1, "sim.device=h100")  # compute_ms is given: only the copies differ
    n = ex.layout.total
    assert tm.host_bytes_per_s == 51.2e9
    # Each step's gradient to the host, and each reply's parameters to the device but the
    # last (no step follows it).
    assert gpu - cpu == pytest.approx((2 * STEPS - 1) * 4 * n / 51.2e9, rel=1e-6)


def test_the_old_bytes_key_is_refused_naming_the_new_one():
    with pytest.raises(ConfigError, match="sim.apply_gbps: renamed to sim.apply_gbytes_per_s"):
        load_config(None, ["sim.apply_gbps=15"])


def test_the_workers_links_are_their_own():
    # Two workers on one shard: each has its own link, so neither waits for the other's.
    cfg = load_config(None, ["task.model=mlp", "task.dataset=digits", "cluster.servers=1", "cluster.workers=2",
                             "train.steps_per_worker=3", "eval.enabled=false", "sim.compute_ms=1"])
    ex = Executor(cfg)
    from psgd.sim.engine import Engine
    engine = Engine(ex, TimeModel.from_config(cfg.sim, 1.0), steps_per_worker=3, max_time_s=1e9, eval_every_s=None)
    engine.run()
    assert len(engine.net.worker_up) == len(engine.net.worker_down) == 2 and len(engine.net.shard_in) == 1
    assert all(link.free_at > 0 for link in engine.net.worker_up + engine.net.worker_down)
