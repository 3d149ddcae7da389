"""Wire compression: exact byte counts, top-k error feedback, the server's sparse
update touching exactly the chosen coordinates, and every codec's round trip within
its stated bound from a tensor of any shape."""
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.servers.state import PushStatus, ShardState
from psgd.wire.codecs import CODECS, FP16_RANGE, CodecOptions, WireEncoder, codec_for_compression, topk_count
from psgd.wire.payload import frame_to_tensor, wire_nbytes


def dense(idx: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n).index_put_((idx.long(),), values)


def test_topk_error_feedback_partitions_the_accumulated_gradient_exactly():
    torch.manual_seed(0)
    n = 1000
    enc = WireEncoder("topk", [n], topk_ratio=0.03)
    for _ in range(20):
        g = torch.randn(n)
        accumulated = enc.codec.residuals[0] + g          # what this step owes the server
        idx, values = enc.codec.select(0, g)
        assert idx.numel() == 30 and idx.unique().numel() == 30
        assert torch.equal(dense(idx, values, n) + enc.codec.residuals[0], accumulated)
        assert torch.all(enc.codec.residuals[0][idx.long()] == 0)
        # Every kept coordinate is at least as large as anything left behind.
        assert values.abs().min() >= enc.codec.residuals[0].abs().max()


def test_topk_sent_plus_residual_equals_sum_of_gradients():
    # Integer-valued gradients keep every float sum exact, so the identity is checked bit for bit.
    gen = torch.Generator().manual_seed(1)
    n = 257
    enc = WireEncoder("topk", [n], topk_ratio=0.05)
    total, sent = torch.zeros(n), torch.zeros(n)
    for _ in range(40):
        g = torch.randint(-50, 50, (n,), generator=gen).float()
        total += g
        idx, values = enc.codec.select(0, g)
        sent.index_add_(0, idx.long(), values)
    assert torch.equal(sent + enc.codec.residuals[0], total)


@pytest.mark.parametrize("encoding,per_elem", [("none", 4), ("fp16", 2), ("bf16", 2)])
def test_dense_wire_bytes_are_exact(encoding, per_elem):
    sizes = [1000, 999]
    enc = WireEncoder(encoding, sizes)
    for _ in range(3):
        for s, n in enumerate(sizes):
            out = enc.encode(s, torch.randn(n))
            assert [memoryview(f).nbytes for f in out.frames] == [per_elem * n]
    assert enc.wire_bytes == 3 * per_elem * sum(sizes)
    assert enc.fp32_bytes == 3 * 4 * sum(sizes)
    assert enc.compression_ratio == per_elem / 4


def test_topk_wire_bytes_are_exact():
    sizes = [1000, 10]
    enc = WireEncoder("topk", sizes, topk_ratio=0.01)
    ks = [topk_count(n, 0.01) for n in sizes]
    assert ks == [10, 1]
    for s, n in enumerate(sizes):
        out = enc.encode(s, torch.randn(n))
        assert out.nnz == ks[s]
        assert [memoryview(f).nbytes for f in out.frames] == [4 * ks[s], 4 * ks[s]]
    assert enc.wire_bytes == 8 * sum(ks) == wire_nbytes("topk", 1010, sum(ks))
    assert enc.compression_ratio == 8 * 11 / (4 * 1010)


def test_f16_scaling_keeps_large_gradients_finite():
    g = torch.tensor([1e6, -3e5, 2.0, 0.0])
    out = WireEncoder("fp16", [4]).encode(0, g)
    wire = frame_to_tensor(out.frames[0], "fp16", 4)
    assert out.scale == 1e6 / FP16_RANGE
    decoded = wire.float() * out.scale
    assert torch.isfinite(decoded).all()
    torch.testing.assert_close(decoded, g, rtol=1e-3, atol=out.scale * 1e-3)


def _cfg(**over):
    sets = ["task.model=linear", "task.dataset=synthetic", "cluster.servers=1", "cluster.workers=1",
            "consistency.mode=asp"] + [f"{k}={v}" for k, v in over.items()]
    return load_config(None, sets)


def test_sparse_push_with_momentum_equals_the_dense_push():
    cfg = _cfg(**{"optimizer.momentum": 0.9, "optimizer.lr": 0.25})
    a, b = ShardState(cfg, 0, torch.zeros(100)), ShardState(cfg, 0, torch.zeros(100))
    for st in (a, b):
        st.register(0, 0.0)
    idx = torch.tensor([3, 50, 99], dtype=torch.int32)
    vals = torch.tensor([1.0, -2.0, 0.5])
    for seq in range(3):
        assert a.push(0, seq, seq, a.version, (idx, vals)).status is PushStatus.APPLIED
        b.push(0, seq, seq, b.version, dense(idx, vals, 100))
    assert torch.equal(a.params, b.params)


def test_topk_ratio_is_validated():
    with pytest.raises(ConfigError, match="wire.topk_ratio"):
        load_config(None, ["wire.compression=topk", "wire.topk_ratio=0"])
    assert codec_for_compression(load_config(None, ["wire.compression=topk"]).wire.compression).name == "topk"


@pytest.mark.parametrize("encoding", ["fp16", "bf16"])
def test_a_dense_encoding_into_a_given_tensor_equals_the_encoders_own(encoding):
    g = torch.randn(500) * 3
    own = WireEncoder(encoding, [500]).encode(0, g)
    out = torch.empty(500, dtype=CODECS[encoding].wire_dtype)
    into = WireEncoder(encoding, [500]).encode(0, g, out=out)
    assert into.tensor is out and torch.equal(out, own.tensor) and into.scale == own.scale
    assert bytes(into.frames[0]) == bytes(own.frames[0])


def test_encoding_into_a_tensor_of_the_wrong_kind_is_refused():
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("fp16", [10]).encode(0, torch.ones(10), out=torch.empty(10, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("fp16", [10]).encode(0, torch.ones(10), out=torch.empty(9, dtype=torch.float16))
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("none", [10]).encode(0, torch.ones(10), out=torch.empty(10))
    assert WireEncoder("topk", [10]).wire_dtype(0) is None and WireEncoder("none", [10]).wire_dtype(0) is torch.float32


def decoded(name: str, encoded, numel: int) -> torch.Tensor:
    got = CODECS[name].decode(encoded.frames, numel, encoded.nnz, encoded.scale, torch.empty(numel))
    return dense(*got, numel) if isinstance(got, tuple) else got


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("shape", [(1,), (7,), (63,), (65,), (1000,), (33, 7), (3, 5, 2, 7)])
def test_every_codec_round_trip_is_within_its_stated_bound_from_any_shape(name, shape):
    gen = torch.Generator().manual_seed(len(shape) * 1000 + shape[0])
    x = torch.randn(shape, generator=gen) * torch.rand(shape, generator=gen) ** 4 * 10  # magnitudes over decades
    n = x.numel()
    options = CodecOptions(topk_ratio=0.1)
    encoded = WireEncoder(name, [n], topk_ratio=options.topk_ratio).encode(0, x)
    err = (decoded(name, encoded, n).double() - x.reshape(-1).double()).abs()
    assert bool((err <= CODECS[name].round_trip_bound(x, options)).all()), f"{name}: max error {float(err.max())}"
    # A shaped tensor puts on the wire the bytes of its flat elements.
    flat = WireEncoder(name, [n], topk_ratio=options.topk_ratio).encode(0, x.reshape(-1).clone())
    assert [bytes(f) for f in encoded.frames] == [bytes(f) for f in flat.frames]
    assert (encoded.scale, encoded.nnz) == (flat.scale, flat.nnz)


def test_topk_sends_its_indices_in_ascending_order():
    # Sorted, so every device's top-k puts the same bytes on the wire whatever order its kernel returns.
    g = torch.randn(5000, generator=torch.Generator().manual_seed(2))
    idx, values = WireEncoder("topk", [5000], topk_ratio=0.02).codec.select(0, g)
    assert idx.numel() == 100 and bool((idx[1:] > idx[:-1]).all())
    assert torch.equal(values, g[idx.long()])
