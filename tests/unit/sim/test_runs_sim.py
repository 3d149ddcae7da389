"""The virtual cluster with wire.compression.choose_by: the default (shard) is today's run
bit for bit, key or no key; under tensor a push's bytes are its runs' encoded bytes, as
the real encoder counts them, and the time model charges each run its own codec."""
import torch
from sgd_reference import STEPS, cfg_for
from sgd_reference import run_virtual as run

from psgd.runtime.event_names import Event
from psgd.sim import TimeModel
from psgd.wire.codecs import codec_named

TENSOR = "{default: int8, small: none, choose_by: tensor}"


def same(a, b):
    (ex_a, result_a, events_a, _), (ex_b, result_b, events_b, _) = a, b
    return (events_a == events_b and result_a.evals == result_b.evals
            and all(torch.equal(x.params, y.params) for x, y in zip(ex_a.shards, ex_b.shards)))


def test_choose_by_shard_is_todays_run_bit_for_bit_and_tensor_is_not():
    over = {"eval.enabled": "true", "eval.every_s": 0.005, "train.steps_per_worker": 10}
    plain = run(cfg_for("asp", 2, **over))
    assert plain[1].evals and same(plain, run(cfg_for("asp", 2, **over, **{"wire.compression": "{choose_by: shard}"})))
    int8 = run(cfg_for("asp", 2, **over, **{"wire.compression": "int8"}))
    for key in ("{default: int8, choose_by: shard}", "{default: int8, choose_by: tensor}"):  # one int8 run a shard
        assert same(int8, run(cfg_for("asp", 2, **over, **{"wire.compression": key})))
    assert not same(plain, int8)
    tensor = run(cfg_for("asp", 2, **over, **{"wire.compression": TENSOR}))
    assert not same(plain, tensor) and not same(int8, tensor)  # what the comparisons would see if a key mattered


def test_a_push_in_runs_costs_its_runs_bytes_and_each_run_its_own_codec_time():
    cfg = cfg_for("asp", 1, **{"wire.compression": TENSOR})
    ex, _, events, engine = run(cfg)
    # The digits MLP on 2 shards: the big weight split over both (int8), the small tensors with its tail (fp32).
    assert [[(r.encoding, r.numel) for r in plan] for plan in ex.plans] == [[("int8", 2405)],
                                                                          [("int8", 1691), ("none", 714)]]
    done = [e for e in events if e["event"] == Event.DONE]
    per_push = sum(codec_named(r.encoding).wire_nbytes(r.numel) for plan in ex.plans for r in plan)
    assert done[0]["bytes_sent"] == STEPS * per_push
    assert done[0]["fp32_bytes"] == STEPS * 4 * sum(ex.layout.shard_sizes)
    # Each shard's decode: its int8 run at int8's rate, its fp32 run free, as one-codec models charge them.
    int8 = TimeModel.from_config(cfg.sim, cfg.sim.compute_ms, "int8")
    assert [d for _, d in engine.time.push_codec_s] == [4 * n / int8.decode_bytes_per_s for n in (2405, 1691)]
    assert engine.time.push_codec_s[1][0] == int8.before_push_s([1691])
    assert engine.time.service_s(2405, shard=1) < engine.time.service_s(2405, shard=0)
