"""The virtual cluster's replies in a reply encoding (wire.compression.replies): a
simulated worker trains on exactly what a real one decodes (the same oracle as
tests/unit/workers/test_reply_encoding.py), the default is unchanged bit for bit,
and a reply's bytes, on the links and in the done event, follow the real client's rule."""
import torch
from sgd_reference import STEPS, cfg_for, reference_on_replies

from psgd.runtime.event_names import Event
from psgd.sim import Engine, Executor, TimeModel
from psgd.wire.codecs import CODECS, encoding_of
from psgd.wire.replies import ReplyEncoder, decode_reply, reply_nbytes


def run(cfg):
    """(executor, result, events) of `cfg` on the virtual cluster."""
    events = []
    ex = Executor(cfg)
    engine = Engine(ex, TimeModel.for_run(cfg, cfg.sim.compute_ms),
                    steps_per_worker=cfg.train.steps_per_worker, max_time_s=cfg.train.max_time_s,
                    eval_every_s=cfg.eval.every_s if cfg.eval.enabled else None, emit=events.append)
    return ex, engine.run(), events


def test_a_simulated_worker_trains_on_exactly_the_decoded_replies():
    cfg = cfg_for("asp", 1, **{"wire.compression": "{replies: int8}"})
    ex, _, events = run(cfg)
    for shard, flat in zip(ex.shards, reference_on_replies(cfg, STEPS, "int8")):
        assert torch.equal(shard.params, flat)
    done = [e for e in events if e["event"] == Event.DONE]
    sizes = ex.layout.shard_sizes
    # The real worker's count for the same run (tests/unit/workers/test_reply_encoding.py): STEPS pulls.
    assert done[0]["pull_bytes"] == STEPS * sum(reply_nbytes("int8", n) for n in sizes)
    assert done[0]["pull_fp32_bytes"] == STEPS * 4 * sum(sizes)


def test_the_default_replies_are_unchanged_bit_for_bit():
    over = {"consistency.staleness": 1, "eval.enabled": "true", "eval.every_s": 0.01}
    runs = {name: run(cfg_for("ssp", 3, **over, **sets)) for name, sets in
            (("default", {}), ("none", {"wire.compression": "{replies: none}"}),
             ("int8", {"wire.compression": "{replies: int8}"}))}
    (ex, result, events), (ex_none, result_none, events_none) = runs["default"], runs["none"]
    assert events == events_none and result.evals == result_none.evals and result.evals
    for a, b in zip(ex.shards, ex_none.shards):
        assert torch.equal(a.params, b.params)
    ex_int8 = runs["int8"][0]  # what the comparison would see if replies changed
    assert not all(torch.equal(a.params, b.params) for a, b in zip(ex.shards, ex_int8.shards))


def test_encoded_replies_take_their_own_bytes_on_the_links():
    slow = {"sim.bandwidth_gbps": 0.01, "train.steps_per_worker": 5}  # the links dominate each round
    _, fp32, _ = run(cfg_for("asp", 2, **slow))
    _, int8, _ = run(cfg_for("asp", 2, **slow, **{"wire.compression": "{replies: int8}"}))
    assert int8.end_s < 0.75 * fp32.end_s


def test_the_simulator_takes_a_mapping_that_sends_every_push_alike_and_names_one_that_does_not():
    from psgd.config import ConfigError, load_config
    wire = lambda text: load_config(None, [f"wire.compression={text}"]).wire  # noqa: E731
    assert encoding_of(wire("{replies: int8}")) == "f32"
    assert encoding_of(wire("{default: int8, deltas: int8, small: int8}")) == "int8"
    for per_shard in ("{default: fp16, small: none}", "{deltas: int8}"):
        try:
            encoding_of(wire(per_shard))
        except ConfigError as exc:
            assert str(exc).startswith("wire.compression: the simulator's time model takes one push encoding")
        else:
            raise AssertionError(f"{per_shard} was taken")


def test_a_restarted_shard_encodes_its_replies_afresh_though_its_versions_repeat():
    ex = Executor(cfg_for("asp", 1, **{"wire.compression": "{replies: int8}", "checkpoint.enabled": "false"}))
    n = ex.layout.shard_sizes[0]
    ex.shards[0].push(0, 0, 0, 0, torch.full((n,), 0.5))
    before = ex.pulled_params(0, ex.shards[0].live_params(), ex.shards[0].version)
    ex.restart_shard(0, None, 1.0)  # back to the initial parameters at version 0
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
    assert TimeModel.for_run(int8, 1.0).after_pull_s(n) == 4 * n / rate
    assert TimeModel.for_run(cfg_for("asp", 1), 1.0).after_pull_s(n) == 0.0  # fp32 on a CPU worker: nothing
