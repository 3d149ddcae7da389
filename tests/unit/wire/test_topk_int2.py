"""topk_int2 (psgd.wire.codecs.topk_int2): the top-k codec's coordinates with int2_ef's 2-bit
values, no residual of its own; its three frames checked on decode as its two parts check theirs."""
import pytest
import torch

from psgd.wire.codecs import CodecOptions, WireEncoder, codec_named
from psgd.wire.codecs._blocks import quantize
from psgd.wire.codecs.topk import topk_count
from psgd.wire.protocol import ProtocolError

N, RATIO = 1000, 0.2
CODEC = codec_named("topk_int2")


def encode(x, ratio=RATIO):
    return WireEncoder("topk_int2", [x.numel()], topk_ratio=ratio).encode(0, x)


def test_it_sends_the_top_k_indices_and_their_values_in_int2_codes():
    x = torch.randn(N, generator=torch.Generator().manual_seed(3))
    enc = encode(x)
    k = topk_count(N, RATIO)
    indices, values = CODEC.decode(enc.frames, N, enc.nnz, enc.scale, None)
    want = x.abs().topk(k).indices.sort().values
    assert enc.nnz == k and torch.equal(indices.long(), want)
    codes, scales = quantize(x[want], 2)  # int2_ef's quantizer on the chosen values
    assert torch.equal(values, (codes.float() - 2) * scales.repeat_interleave(64)[:k])
    assert sum(memoryview(f).nbytes for f in enc.frames) == CODEC.wire_nbytes(N, k) == 4 * k + k // 4 + 4 * 4


def test_it_keeps_no_residual_so_one_gradient_always_encodes_the_same():
    x = torch.randn(N, generator=torch.Generator().manual_seed(4))
    encoder = WireEncoder("topk_int2", [N], topk_ratio=RATIO)
    first = [bytes(f) for f in encoder.encode(0, x).frames]
    assert [bytes(f) for f in encoder.encode(0, x).frames] == first


def test_the_wire_cost_per_element_is_the_bytes_it_sends():
    n = 1280  # 64 coordinates at 5%: one block of scales
    enc = encode(torch.randn(n), ratio=0.05)
    assert sum(memoryview(f).nbytes for f in enc.frames) == CODEC.bytes_per_element(CodecOptions(topk_ratio=0.05)) * n


@pytest.mark.parametrize("forge, code", [
    ("two frames", "bad_frames"),
    ("index past the end", "bad_index"),
    ("negative index", "bad_index"),
    ("nnz above numel", "bad_size"),
    ("short code frame", "bad_size"),
    ("NaN scale", "bad_value"),
    ("negative scale", "bad_value"),
    ("header scale", "bad_field"),
])
def test_a_forged_payload_is_refused_naming_what(forge, code):
    x = torch.randn(N, generator=torch.Generator().manual_seed(5))
    enc = encode(x)
    indices, codes, scales = (bytearray(f) for f in enc.frames)
    frames, nnz, scale = [indices, codes, scales], enc.nnz, 1.0
    if forge == "two frames":
        frames = frames[:2]
    elif forge == "index past the end":
        frames[0][-4:] = N.to_bytes(4, "little")
    elif forge == "negative index":
        frames[0][:4] = (-1).to_bytes(4, "little", signed=True)
    elif forge == "nnz above numel":
        nnz = N + 1
    elif forge == "short code frame":
        frames[1] = frames[1][:-1]
    elif forge == "NaN scale":
        frames[2][:4] = bytes(torch.tensor([float("nan")]).numpy().tobytes())
    elif forge == "negative scale":
        frames[2][:4] = bytes(torch.tensor([-1.0]).numpy().tobytes())
    else:
        scale = 2.0
    with pytest.raises(ProtocolError) as info:
        CODEC.decode(frames, N, nnz, scale, None)
    assert info.value.code.value == code, str(info.value)
