"""SparseLoCo (psgd.core.local_methods.sparseloco): each delta leaves top-k sparsified and
2-bit quantized in the wire's topk_int2 codec, what it did not send stays in the worker's error
feedback (decayed by beta), and the shards' outer rule has no momentum."""
import pytest
import torch

from psgd.config import ConfigError, WireConfig, load_config
from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods import method_for
from psgd.wire.codecs import WireEncoder
from psgd.wire.codecs.registry import DeltaCodecs, codec_named
from psgd.wire.codecs.topk import topk_count
from tests.support.local_methods import method_of

SIZES = [1000, 301]
RATIO = 0.03
BETA = 0.95
BLOCK = 64  # int2's block of values sharing one scale (psgd.wire.codecs._blocks)


def sparseloco(ratio=RATIO, compression="topk_int2"):
    wire = WireConfig(compression=compression, topk_ratio=ratio)
    method = method_of(LocalConfig(steps=4, method="sparseloco", outer_momentum=BETA), 4, wire)
    return method, DeltaCodecs(wire, SIZES)


def deltas(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen) for n in SIZES]


def on_the_wire(pushed, ratio=RATIO):
    """What the shards decode from a push of `pushed` in topk_int2, dense, and its payload bytes."""
    encoder = WireEncoder("topk_int2", SIZES, topk_ratio=ratio)
    dense = []
    for s, t in enumerate(pushed):
        enc = encoder.encode(s, t)
        indices, values = codec_named("topk_int2").decode(enc.frames, t.numel(), enc.nnz, enc.scale, None)
        dense.append(torch.zeros(t.numel()).index_copy_(0, indices.long(), values))
    return dense, encoder.wire_bytes


def test_what_is_sent_plus_the_error_feedback_is_the_decayed_sum_of_the_deltas():
    method, codecs = sparseloco()
    error = [torch.zeros(n) for n in SIZES]
    for seed in range(5):
        delta = deltas(seed)
        want = [e * BETA + d for e, d in zip(error, delta)]  # e <- beta * e + delta, before sending
        sent, _ = on_the_wire(method.outgoing([d.clone() for d in delta], codecs))
        for s, n in enumerate(SIZES):
            assert torch.equal(method.errors[s], want[s] - sent[s])  # what was not sent, to the last bit
            nonzero = sent[s].nonzero().flatten()
            assert 0 < nonzero.numel() <= topk_count(n, RATIO)
            largest = want[s].abs().topk(topk_count(n, RATIO)).indices
            assert set(nonzero.tolist()) <= set(largest.tolist())  # only the k largest of e leave
        error = [e.clone() for e in method.errors]


def test_the_values_travel_in_two_bits_each_one_magnitude_per_block():
    method, codecs = sparseloco(ratio=0.2)
    delta = deltas(7)
    sent, nbytes = on_the_wire(method.outgoing([d.clone() for d in delta], codecs), ratio=0.2)
    for d, s in zip(delta, sent):  # the first push: e is the delta
        k = topk_count(d.numel(), 0.2)
        index = d.abs().topk(k).indices.sort().values
        values, chosen = d[index], s[index]
        for start in range(0, k, BLOCK):
            block, out = values[start:start + BLOCK], chosen[start:start + BLOCK]
            magnitudes = set(out[out != 0].abs().tolist())
            assert magnitudes == {block.abs().max().item()}  # ternary: -amax, 0 or +amax
            assert torch.all(torch.sign(out[out != 0]) == torch.sign(block[out != 0]))
    # an int32 index, 2 bits and one fp32 scale per 64 values a coordinate: no fp32 value travels
    ks = [topk_count(n, 0.2) for n in SIZES]
    assert nbytes == sum(4 * k + -(-2 * k // 8) + 4 * -(-k // BLOCK) for k in ks)


def test_the_outer_rule_steps_the_mean_of_what_was_sent_without_momentum():
    cfg = load_config(None, ["local.steps=4", "local.method=sparseloco", "local.outer_momentum=0.95",
                             "local.outer_lr=0.8", "wire.compression=topk_int2", "cluster.workers=4"])
    rule = method_for(cfg).outer_rule(cfg.optimizer, live=False)
    assert (rule.name, rule.lr, rule.momentum, rule.nesterov, rule.push_share) == ("sgd", 0.8, 0.0, False, 1.0)


def test_sparseloco_needs_top_k_int2_pushes_and_no_outer_nesterov():
    method, codecs = sparseloco(compression="topk")
    with pytest.raises(ConfigError, match="wire.compression"):
        method.outgoing(deltas(0), codecs)
    with pytest.raises(ConfigError, match="local.method"):
        method_of(LocalConfig(steps=4, method="sparseloco", outer_momentum=0.9, outer_nesterov=True), 4)


def test_the_error_feedback_travels_in_the_state_dict():
    method, codecs = sparseloco()
    method.outgoing(deltas(1), codecs)
    again, _ = sparseloco()
    again.load_state_dict(method.state_dict())
    a, b = method.outgoing(deltas(2), codecs), again.outgoing(deltas(2), codecs)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
