"""Parameters in replies (wire.compression.replies): each reply codec's round trip
within its stated bound on every shape, one byte count for real runs and the
simulator, each version encoded once, the config's reply values checked against
the codecs, and malformed replies (wrong length, forged or non-finite scale,
non-finite codes, wrong frames or encoding) refused before anything is loaded."""

import pytest
import torch

from psgd.config import load_config
from psgd.config.operations import REPLY_COMPRESSIONS
from psgd.core.sharding import layout_for_module
from psgd.wire import protocol as P
from psgd.wire.codecs import CODECS, CodecOptions, codec_for_compression
from psgd.wire.codecs._blocks import BLOCK, max_scale
from psgd.wire.codecs.registry import check_reply_codecs
from psgd.wire.protocol import ProtocolError
from psgd.wire.replies import ReplyDecoder, ReplyEncoder, decode_reply, reply_encoding, reply_nbytes
from psgd.workers.client import PSClient, RemoteError

REPLY_CODECS = ["fp16", "bf16", "int8", "int4"]
SHAPES = [1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 1000]


def stated_bound(encoding: str, x: torch.Tensor) -> torch.Tensor:
    """Each element's largest round-trip error, as its codec's docstring states it."""
    return CODECS[encoding].round_trip_bound(x, CodecOptions())


def roundtrip(encoding: str, params: torch.Tensor, version: int = 0) -> torch.Tensor:
    enc = ReplyEncoder(encoding).encode(params, version)
    return decode_reply(enc.encoding, params.numel(), enc.scale, torch.empty(params.numel()), frames=enc.frames)


@pytest.mark.parametrize("encoding", REPLY_CODECS)
@pytest.mark.parametrize("numel", SHAPES)
def test_a_reply_round_trip_is_within_its_codecs_stated_bound(encoding, numel):
    g = torch.Generator().manual_seed(numel)
    for params in (torch.randn(numel, generator=g) * 0.05, torch.randn(numel, generator=g) * 30.0,
                   torch.zeros(numel)):
        got = roundtrip(encoding, params)
        err = (got.double() - params.double()).abs()
        assert bool((err <= stated_bound(encoding, params)).all()), f"{encoding}: max error {float(err.max())}"
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("encoding", REPLY_CODECS)
def test_reply_bytes_are_what_the_codec_puts_on_the_wire(encoding):
    """The one rule a real client and the simulator's replies count by."""
    for numel in SHAPES:
        enc = ReplyEncoder(encoding).encode(torch.randn(numel), 0)
        assert sum(memoryview(f).nbytes for f in enc.frames) == reply_nbytes(encoding, numel)
    assert reply_nbytes("none", 10) == 40 and reply_nbytes("int8", 64) == 64 + 4


def test_each_version_is_encoded_once_and_into_tensors_of_its_own():
    encoder = ReplyEncoder("int8")
    params = torch.randn(300)
    first = encoder.encode(params, 5)
    assert encoder.encode(params, 5) is first and encoder.encoded == 1
    kept = [bytes(f) for f in first.frames]
    params.add_(1.0)
    second = encoder.encode(params, 6)
    assert encoder.encoded == 2 and [bytes(f) for f in first.frames] == kept  # a send in flight keeps its bytes
    assert [bytes(f) for f in second.frames] != kept
    with pytest.raises(ValueError, match="residual per receiver"):
        ReplyEncoder("topk")
    with pytest.raises(ValueError, match="nothing to encode"):
        ReplyEncoder("none")


def test_the_config_chooses_the_reply_encoding_and_the_plain_string_keeps_fp32():
    assert reply_encoding(load_config(None, []).wire) == "none"
    assert reply_encoding(load_config(None, ["wire.compression=int8"]).wire) == "none"  # pushes only
    assert reply_encoding(load_config(None, ["wire.compression={replies: int4}"]).wire) == "int4"
    assert reply_encoding(load_config(None, ["wire.compression={replies: none}"]).wire) == "none"


def test_the_reply_values_are_exactly_the_codecs_without_error_feedback_that_send_every_coordinate():
    assert sorted(REPLY_COMPRESSIONS) == sorted(c.name for c in CODECS.values()
                                                if not (c.error_feedback or c.sparse))
    assert all(not (codec_for_compression(v).error_feedback or codec_for_compression(v).sparse)
               for v in REPLY_COMPRESSIONS)
    assert "topk_int2" not in REPLY_COMPRESSIONS  # keeps no residual, but sends some coordinates only
    with pytest.raises(ImportError, match="CODEC_WORDS"):
        check_reply_codecs(CODECS, (*REPLY_COMPRESSIONS, "topk"))


def test_the_decoder_counts_pulled_bytes_and_reuses_one_buffer_per_shard_and_slot():
    dec = ReplyDecoder([100, 50])
    enc = ReplyEncoder("int8").encode(torch.randn(100), 0)
    a = dec.decode(0, 0, "int8", 100, 1.0, enc.frames)
    b = dec.decode(0, 1, "int8", 100, 1.0, enc.frames)
    assert a.data_ptr() != b.data_ptr() and torch.equal(a, b)
    assert dec.decode(0, 0, "int8", 100, 1.0, enc.frames).data_ptr() == a.data_ptr()
    dec.decode(0, 0, "int8", 100, 1.0, enc.frames, counted=False)  # a registration's parameters
    dec.count("none", 50)
    assert dec.wire_bytes == 3 * reply_nbytes("int8", 100) + 200
    assert dec.fp32_bytes == 3 * 400 + 200
    assert dec.decode_s > 0


# ---- hostile replies ----------------------------------------------------------------------------

def block_frames(numel: int):
    enc = ReplyEncoder("int8").encode(torch.randn(numel), 0)
    return [bytearray(f) for f in enc.frames]


def scales_of(frames) -> torch.Tensor:
    return torch.frombuffer(frames[1], dtype=torch.float32)


def forged(what: str, numel: int = 200):
    """(encoding, numel, scale, frames) of a malformed reply of `numel` parameters."""
    frames = block_frames(numel)
    if what == "short codes":
        frames[0] = frames[0][:-1]
    elif what == "long scales":
        frames[1] = frames[1] + bytes(4)
    elif what == "NaN block scale":
        scales_of(frames)[1] = float("nan")
    elif what == "infinite block scale":
        scales_of(frames)[0] = float("inf")
    elif what == "forged block scale":
        scales_of(frames)[2] = float(max_scale(8)) * 2
    elif what == "negative block scale":
        scales_of(frames)[0] = -1.0
    elif what == "non-finite code":
        frames[0][3] = 0  # code 0 marks a non-finite value: never in parameters
    elif what == "one frame":
        frames = frames[:1]
    elif what == "header scale on a block codec":
        return "int8", numel, 2.0, frames
    elif what.startswith("fp16"):
        f16 = ReplyEncoder("fp16").encode(torch.randn(numel), 0)
        scale = {"fp16 NaN scale": float("nan"), "fp16 infinite scale": float("inf"), "fp16 zero scale": 0.0,
                 "fp16 negative scale": -f16.scale, "fp16 overflowing scale": 1e38}[what]
        return "fp16", numel, scale, list(f16.frames)
    elif what in ("topk", "int2_ef", "none", "zstd"):
        return what, numel, 1.0, frames
    return "int8", numel, 1.0, frames


HOSTILE = ["short codes", "long scales", "NaN block scale", "infinite block scale", "forged block scale",
           "negative block scale", "non-finite code", "one frame", "header scale on a block codec",
           "fp16 NaN scale", "fp16 infinite scale", "fp16 zero scale", "fp16 negative scale", "fp16 overflowing scale",
           "topk", "int2_ef", "none", "zstd"]


@pytest.mark.parametrize("what", HOSTILE)
def test_a_malformed_reply_is_refused(what):
    encoding, numel, scale, frames = forged(what)
    with pytest.raises(ProtocolError) as info:
        decode_reply(encoding, numel, scale, torch.empty(numel), frames=frames)
    assert "\n" not in info.value.reason


def test_a_shared_memory_payload_of_the_wrong_dtype_or_size_is_refused():
    wire = torch.randn(200).to(torch.float16)
    with pytest.raises(ProtocolError, match="shared memory"):
        decode_reply("fp16", 200, 1.0, torch.empty(200), wire=wire.to(torch.bfloat16))
    with pytest.raises(ProtocolError, match="shared memory"):
        decode_reply("fp16", 200, 1.0, torch.empty(200), wire=wire[:199])
    with pytest.raises(ProtocolError, match="for a shard of"):
        decode_reply("fp16", 199, 1.0, torch.empty(200), wire=wire[:199])


@pytest.fixture
def client():
    model = torch.nn.Linear(20, 10)  # 210 parameters, one shard
    layout = layout_for_module(model, 1)
    c = PSClient(["127.0.0.1:9"], layout, heartbeat_s=None)  # nothing listens: only its decoding is used
    yield c
    c.close()


@pytest.mark.parametrize("what", ["short codes", "NaN block scale", "forged block scale", "non-finite code",
                                  "fp16 infinite scale", "topk"])
def test_the_client_refuses_a_malformed_reply_with_a_clear_error_and_loads_nothing(client, what):
    encoding, numel, scale, frames = forged(what, client.layout.shard_sizes[0])
    with pytest.raises(RemoteError, match=r"bad_reply") as info:
        client._param(0, P.Params(version=7, encoding=encoding, scale=scale, numel=numel), frames)
    assert "\n" not in str(info.value)
    assert client.replies.wire_bytes == 0 and client.versions == [0]  # nothing counted or noted


def test_the_client_decodes_a_good_encoded_reply_into_its_own_buffer(client):
    numel = client.layout.shard_sizes[0]
    params = torch.randn(numel)
    enc = ReplyEncoder("int8").encode(params, 3)
    got = client._param(0, P.Params(version=3, encoding="int8", numel=numel), list(enc.frames))
    assert torch.equal(got, roundtrip("int8", params))
    assert client.versions[0] == 3 and client.reply_in_slot == [False]
    assert client.replies.wire_bytes == reply_nbytes("int8", numel) and client.replies.fp32_bytes == 4 * numel
