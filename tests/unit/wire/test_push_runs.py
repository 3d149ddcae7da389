"""wire.compression.choose_by: tensor: a shard's push in runs, one codec per stretch of
consecutive tensors with one encoding (psgd.wire.codecs.runs). The plan comes from the
config and the layout alone; a push in runs decodes exactly as each run's codec would
decode its stretch alone; each run keeps its own error-feedback residual; the default
(choose_by: shard) plans one run per shard, the encodings of before."""
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.core.sharding import make_layout
from psgd.wire import protocol as P
from psgd.wire.codecs import CodecOptions, WireEncoder, codec_named, encodings_for
from psgd.wire.codecs.runs import RUNS, Run, decode_runs, plan_fingerprint, push_plans
from psgd.wire.payload import payload_frames

# Placed largest first: w1 (200) and w2 (150), then b1 (10) and b2 (5), on one shard.
SHAPES = [("w1", (20, 10)), ("b1", (10,)), ("w2", (15, 10)), ("b2", (5,))]


def wire(text):
    return load_config(None, [f"wire.compression={text}"]).wire


def plans_for(text, shards=1, local_updates=False):
    layout = make_layout(SHAPES, shards)
    return layout, push_plans(wire(text), layout, local_updates)


def test_each_tensor_takes_its_own_codec_and_consecutive_tensors_with_one_share_a_run():
    layout, plans = plans_for("{default: int8, small: fp16, small_below: 100, choose_by: tensor}")
    assert plans == [(Run("int8", 0, 350), Run("fp16", 350, 15))]
    _, deltas = plans_for("{default: int8, small: none, small_below: 100, deltas: int4, choose_by: tensor}",
                          local_updates=True)
    assert deltas == [(Run("int4", 0, 350), Run("none", 350, 15))]
    # A shard is measured by its tensors, not its own size: by shard, all 365 elements are "small".
    assert push_plans(wire("{default: int8, small: fp16, small_below: 400}"), layout, False) == [(Run("fp16", 0, 365),)]


def test_choose_by_shard_plans_one_run_per_shard_in_the_encodings_of_before():
    layout = make_layout(SHAPES, 2)
    for text in ("none", "int8", "{default: fp16, small: none, small_below: 200, deltas: int8}",
                 "{default: fp16, small: none, small_below: 200, deltas: int8, choose_by: shard}"):
        for local in (False, True):
            plans = push_plans(wire(text), layout, local)
            assert [len(p) for p in plans] == [1, 1]
            assert [p[0].encoding for p in plans] == encodings_for(wire(text), layout.shard_sizes, local)
            assert [plan_fingerprint(layout.fingerprint, p) for p in plans] == [layout.fingerprint] * 2


def test_a_plan_of_several_runs_changes_the_register_fingerprint():
    layout, (plan,) = plans_for("{default: int8, small: fp16, small_below: 100, choose_by: tensor}")
    _, (other,) = plans_for("{default: int4, small: fp16, small_below: 100, choose_by: tensor}")
    assert len({layout.fingerprint, plan_fingerprint(layout.fingerprint, plan),
                plan_fingerprint(layout.fingerprint, other)}) == 3


@pytest.mark.parametrize("bad, message", [
    ("{choose_by: layer}", "wire.compression.choose_by: must be one of shard, tensor, got 'layer'"),
    ("{choose_by: 3}", "wire.compression.choose_by: must be one of shard, tensor"),
])
def test_a_bad_choose_by_names_its_key(bad, message):
    with pytest.raises(ConfigError, match=message) as info:
        wire(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["{default: int8, small: fp16, small_below: 100, choose_by: tensor}",
                                  "{default: topk, small: none, small_below: 100, choose_by: tensor}",
                                  "{default: int2_ef, small: int4, small_below: 100, choose_by: tensor}"])
def test_a_push_in_runs_decodes_exactly_as_each_run_alone(text):
    """The runs' frames one after another, through the protocol and back: each stretch equals
    what a fresh codec of its run encodes and decodes from that stretch alone."""
    _, (plan,) = plans_for(text)
    enc = WireEncoder.from_plans([plan], topk_ratio=0.1)
    grad = torch.randn(365, generator=torch.Generator().manual_seed(3))
    encoded = enc.encode(0, grad)
    assert encoded.encoding == RUNS and [r[0] for r in encoded.runs] == [r.encoding for r in plan]
    rec, frames = P.decode(P.encode(P.Push(encoding=encoded.encoding, numel=365, runs=encoded.runs), encoded.frames))
    assert payload_frames(rec) == len(frames) == sum(codec_named(r.encoding).frames for r in plan)
    got = decode_runs(plan, rec.runs, frames, torch.empty(365))
    for run in plan:
        codec = codec_named(run.encoding)
        alone = codec([run.numel], CodecOptions(topk_ratio=0.1)).encode(0, grad[run.offset:run.offset + run.numel])
        dense = codec.decode(alone.frames, run.numel, alone.nnz, alone.scale, torch.empty(run.numel))
        if isinstance(dense, tuple):
            dense = torch.zeros(run.numel).index_add_(0, dense[0].long(), dense[1])
        assert torch.equal(got[run.offset:run.offset + run.numel], dense)
    assert enc.wire_bytes == sum(memoryview(f).nbytes for f in encoded.frames)
    assert enc.wire_bytes == sum(codec_named(r.encoding).wire_nbytes(r.numel, n)
                                 for r, (_, _, n) in zip(plan, encoded.runs))
    assert enc.fp32_bytes == 4 * 365 and enc.encoding == "mixed" and not enc.elementwise


def test_error_feedback_keeps_a_residual_per_run_and_loses_nothing_over_many_pushes():
    """int2_ef in one run, top-k in another: after 200 pushes what the shard decoded plus each
    run's residual is the sum of the gradients (fp32 rounding of the sums aside)."""
    layout = make_layout(SHAPES, 1)
    plan = push_plans(wire("{default: int2_ef, small: topk, small_below: 100, choose_by: tensor}"), layout, False)[0]
    enc = WireEncoder.from_plans([plan], topk_ratio=0.2)
    gen = torch.Generator().manual_seed(11)
    total = torch.zeros(365, dtype=torch.float64)
    applied = torch.zeros(365, dtype=torch.float64)
    for _ in range(200):
        grad = torch.randn(365, generator=gen)
        total += grad.double()
        e = enc.encode(0, grad)
        applied += decode_runs(plan, e.runs, e.frames, torch.empty(365)).double()
    residual = torch.cat([codec.residuals[slot] for codec, slot in enc.run_codecs(0)]).double()
    assert residual.abs().max() > 0  # something was held back, and is carried
    assert torch.allclose(applied + residual, total, rtol=0, atol=1e-3)
    # Without the residual the loss would show: the sum sent alone misses what it holds.
    assert not torch.allclose(applied, total, rtol=0, atol=1e-3)


def test_an_encoder_refuses_plans_that_do_not_cover_its_shards():
    with pytest.raises(ValueError, match="do not cover"):
        WireEncoder((), [10], plans=[(Run("none", 0, 4), Run("int8", 4, 5))])
