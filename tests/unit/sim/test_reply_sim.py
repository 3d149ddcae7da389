"""The virtual cluster's replies in a reply encoding (wire.compression.replies): a
simulated worker trains on exactly what a real one decodes (the same oracle as
tests/unit/workers/test_reply_encoding.py), the default is unchanged bit for bit,
and a reply's bytes, on the links and in the done event, follow the real client's rule;
a mapping that chooses the pushes' codec per shard runs, each shard in its own codec."""
import pytest
import torch
from sgd_reference import STEPS, cfg_for, reference_on_replies, run_virtual

from psgd.runtime.event_names import Event
from psgd.sim import Executor, TimeModel
from psgd.wire.codecs import CODECS
from psgd.wire.payload import wire_nbytes
from psgd.wire.replies import ReplyEncoder, decode_reply, reply_nbytes


def test_a_simulated_worker_trains_on_exactly_the_decoded_replies():
    cfg = cfg_for("asp", 1, **{"wire.compression": "{replies: int8}"})
    ex, _, events, _ = run_virtual(cfg)
    for shard, flat in zip(ex.shards, reference_on_replies(cfg, STEPS, "int8")):
        assert torch.equal(shard.params, flat)
    done = [e for e in events if e["event"] == Event.DONE]
    sizes = ex.layout.shard_sizes
    # The real worker's count for the same run (tests/unit/workers/test_reply_encoding.py): STEPS pulls.
    assert done[0]["pull_bytes"] == STEPS * sum(reply_nbytes("int8", n) for n in sizes)
    assert done[0]["pull_fp32_bytes"] == STEPS * 4 * sum(sizes)


def test_the_default_replies_are_unchanged_bit_for_bit():
    over = {"consistency.staleness": 1, "eval.enabled": "true", "eval.every_s": 0.01}
    runs = {name: run_virtual(cfg_for("ssp", 3, **over, **sets)) for name, sets in
            (("default", {}), ("none", {"wire.compression": "{replies: none}"}),
             ("mapping", {"wire.compression": "{default: none}"}),
             ("int8", {"wire.compression": "{replies: int8}"}))}
    ex, result, events, _ = runs["default"]
    for same in ("none", "mapping"):  # fp32 replies, fp32 pushes: the default, however it is written
        ex_same, result_same, events_same, _ = runs[same]
        assert events == events_same and result.evals == result_same.evals and result.evals
        for a, b in zip(ex.shards, ex_same.shards):
            assert torch.equal(a.params, b.params)
    ex_int8 = runs["int8"][0]  # what the comparison would see if replies changed
    assert not all(torch.equal(a.params, b.params) for a, b in zip(ex.shards, ex_int8.shards))


def test_encoded_replies_take_their_own_bytes_on_the_links():
    slow = {"sim.bandwidth_gbps": 0.01, "train.steps_per_worker": 5}  # the links dominate each round
    _, fp32, _, _ = run_virtual(cfg_for("asp", 2, **slow))
    _, int8, _, _ = run_virtual(cfg_for("asp", 2, **slow, **{"wire.compression": "{replies: int8}"}))
    assert int8.end_s < 0.75 * fp32.end_s


# The digits MLP on 3 shards holds 1604, 1604 and 1602 values: the last is below small_below.
PER_SHARD = "{default: int8, small: none, small_below: 1603}"


def test_a_mapping_that_chooses_per_shard_pushes_and_charges_each_shard_its_own_codec():
    cfg = cfg_for("asp", 1, **{"cluster.servers": 3, "wire.compression": PER_SHARD})
    ex = Executor(cfg)
    sizes = ex.layout.shard_sizes
    assert [[r.encoding for r in plan] for plan in ex.plans] == [["int8"], ["int8"], ["none"]]
    encoded = [wire_nbytes(plan[0].encoding, n) for plan, n in zip(ex.plans, sizes)]
    assert [(p.shard, p.wire_bytes) for p in ex.compute(0)] == list(enumerate(encoded))  # as a real client counts
    ex, _, events, engine = run_virtual(cfg)
    done = [e for e in events if e["event"] == Event.DONE]
    assert done[0]["bytes_sent"] == STEPS * sum(encoded) and done[0]["fp32_bytes"] == STEPS * 4 * sum(sizes)
    # Each shard's encode and decode at its own codec's stated rates: int8's for the first two, none for fp32.
    int8 = CODECS["int8"].cost
    assert engine.time.push_codec_s == tuple(
        (4 * n / (int8.encode_gbytes_per_s * 1e9), 4 * n / (int8.decode_gbytes_per_s * 1e9)) for n in sizes[:2]
    ) + ((0.0, 0.0),)
    apply_s = [4 * n / engine.time.apply_bytes_per_s for n in sizes]
    assert [engine.time.service_s(n, shard=s) for s, n in enumerate(sizes)] == [
        engine.time.request_s + decode_s + a for (_, decode_s), a in zip(engine.time.push_codec_s, apply_s)]
    assert engine.time.before_push_s(list(sizes), range(3)) == sum(e for e, _ in engine.time.push_codec_s)
    with pytest.raises(ValueError, match="name the shard"):
        engine.time.service_s(sizes[0])  # which codec is not known without the shard


def test_a_restarted_shard_encodes_its_replies_afresh_though_its_versions_repeat():
    ex = Executor(cfg_for("asp", 1, **{"wire.compression": "{replies: int8}", "checkpoint.enabled": "false"}))
    n = ex.layout.shard_sizes[0]
    ex.shards[0].push(0, 0, 0, 0, torch.full((n,), 0.5))
    before = ex.pulled_params(0, ex.shards[0].live_params(), ex.shards[0].version)
    ex.fault_steps.restart_shard(0, None, 1.0)  # back to the initial parameters at version 0
    ex.shards[0].register(0, 1.0)
    ex.shards[0].push(0, 0, 0, 0, torch.full((n,), -0.5))  # version 1 again, other parameters
    after = ex.pulled_params(0, ex.shards[0].live_params(), ex.shards[0].version)
    assert ex.shards[0].version == 1 and not torch.equal(before, after)
    enc = ReplyEncoder("int8").encode(ex.shards[0].params, 1)
    assert torch.equal(after, decode_reply("int8", n, 1.0, torch.empty(n), frames=enc.frames))


def test_a_worker_pays_its_reply_codecs_decode_before_its_next_step():
    int8 = cfg_for("asp", 1, **{"wire.compression": "{replies: int8}", "sim.decode_gbytes_per_s": 99})
    n = 10_000
    rate = CODECS["int8"].cost.decode_gbytes_per_s * 1e9  # the codec's own: sim.decode_gbytes_per_s is the shards'
    assert TimeModel.for_run(int8, 1.0, ()).after_pull_s(n) == 4 * n / rate
    assert TimeModel.for_run(cfg_for("asp", 1), 1.0, ()).after_pull_s(n) == 0.0  # fp32 on a CPU worker: nothing
