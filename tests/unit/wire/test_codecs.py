"""Wire compression: exact byte counts, top-k error feedback, and the server's
sparse update touching exactly the chosen coordinates."""
import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.servers.state import PushStatus, ShardState
from psgd.wire.codecs import CODECS, F16_RANGE, WireEncoder, encoding_of, topk_count
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


@pytest.mark.parametrize("encoding,per_elem", [("f32", 4), ("f16", 2), ("bf16", 2)])
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
    out = WireEncoder("f16", [4]).encode(0, g)
    wire = frame_to_tensor(out.frames[0], "f16", 4)
    assert out.scale == 1e6 / F16_RANGE
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
    assert encoding_of(load_config(None, ["wire.compression=topk"]).wire) == "topk"


@pytest.mark.parametrize("encoding", ["f16", "bf16"])
def test_a_dense_encoding_into_a_given_tensor_equals_the_encoders_own(encoding):
    g = torch.randn(500) * 3
    own = WireEncoder(encoding, [500]).encode(0, g)
    out = torch.empty(500, dtype=CODECS[encoding].wire_dtype)
    into = WireEncoder(encoding, [500]).encode(0, g, out=out)
    assert into.tensor is out and torch.equal(out, own.tensor) and into.scale == own.scale
    assert bytes(into.frames[0]) == bytes(own.frames[0])


def test_encoding_into_a_tensor_of_the_wrong_kind_is_refused():
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("f16", [10]).encode(0, torch.ones(10), out=torch.empty(10, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("f16", [10]).encode(0, torch.ones(10), out=torch.empty(9, dtype=torch.float16))
    with pytest.raises(ValueError, match="cannot be encoded"):
        WireEncoder("f32", [10]).encode(0, torch.ones(10), out=torch.empty(10))
    assert WireEncoder("topk", [10]).wire_dtype(0) is None and WireEncoder("f32", [10]).wire_dtype(0) is torch.float32
