"""Wire format: every record round-trips; malformed headers are refused with a reason; tensor frames are zero-copy."""
import msgpack
import pytest
import torch

from psgd.wire import protocol as P
from psgd.wire.codecs import CODECS
from psgd.wire.payload import frame_to_tensor, tensor_frame


@pytest.mark.parametrize("record", [
    P.Register(req=1, rank=3, role="evaluator", fingerprint="abc"),
    P.Welcome(req=2, shard=1, version=10, clock=4, last_seq=7),
    P.Pull(req=3, rank=1, clock=9),
    P.Push(req=4, rank=2, seq=5, clock=5, read_version=40, encoding="f16", scale=0.5, numel=100),
    P.PushPull(req=5, rank=2, seq=6, clock=6, read_version=41, numel=100),
    P.Params(req=6, version=3, clock=2, min_clock=1, numel=10),
    P.Ack(req=7, version=3, applied=False, staleness=2),
    P.Heartbeat(rank=1), P.Leave(req=8, rank=1), P.Stats(req=9),
    P.StatsReply(req=9, stats={"counters": {"a": 1}}), P.Shutdown(req=10),
    P.Error(req=11, code="bad", reason="why"),
])
def test_every_record_round_trips(record):
    frames = P.encode(record, [b"payload"])
    back, payload = P.decode(frames)
    assert back == record and type(back) is type(record)
    assert [bytes(f) for f in payload] == [b"payload"]


def test_a_reply_carries_its_pull_s_parked_time_only_when_it_was_parked():
    parked = P.Params(req=6, version=3, numel=10, held_s=0.25)
    assert msgpack.unpackb(P.encode(parked)[0])[3]["held_s"] == 0.25
    assert P.decode(P.encode(parked))[0] == parked
    at_once = P.Params(req=6, version=3, numel=10)
    assert "held_s" not in msgpack.unpackb(P.encode(at_once)[0])[3]  # the header a worker before it reads
    assert P.decode(P.encode(at_once))[0].held_s == 0.0


def test_every_message_type_has_a_record():
    assert set(P.RECORDS) == set(P.MsgType)


def header(*items):
    return msgpack.packb(list(items))


@pytest.mark.parametrize("frames, code", [
    ([], "empty"),
    ([b"\xc1\xc1garbage"], "bad_header"),
    ([header(1, 3)], "bad_header"),
    ([header(99, 3, 1, {})], "bad_version"),
    ([header(True, 3, 1, {})], "bad_version"),  # True == 1 in Python, but it is not a version
    ([header(1.0, 3, 1, {})], "bad_version"),
    ([header(1, 999, 1, {})], "bad_type"),
    ([header(1, True, 1, {})], "bad_type"),
    ([header(1, 3, -1, {})], "bad_header"),
    ([header(1, 3, 1, [])], "bad_header"),
    ([header(1, 3, 1, {"rank": "zero"})], "bad_field"),
    ([header(1, 3, 1, {"rank": True})], "bad_field"),
    ([header(1, 3, 1, {"bogus": 1})], "bad_field"),
    ([header(1, 3, 1, {"req": 5})], "bad_field"),
    ([b"\x00" * (P.MAX_HEADER_BYTES + 1)], "header_too_large"),
])
def test_malformed_headers_are_refused(frames, code):
    with pytest.raises(P.ProtocolError) as info:
        P.decode(frames)
    assert info.value.code == code


@pytest.mark.parametrize("encoding", ["f32", "f16", "bf16"])
def test_tensor_frames_round_trip_without_copy(encoding):
    dtype = CODECS[encoding].wire_dtype
    t = torch.arange(1000, dtype=torch.float32).to(dtype)
    frame = tensor_frame(t)
    assert frame.nbytes == 1000 * CODECS[encoding].wire_nbytes(1)
    back = frame_to_tensor(frame, encoding, 1000)
    assert torch.equal(back, t)
    assert back.data_ptr() == t.data_ptr()  # a view of the same memory, not a copy


def test_frame_size_must_match_header():
    frame = tensor_frame(torch.zeros(10))
    with pytest.raises(P.ProtocolError, match="bad_size"):
        frame_to_tensor(frame, "f32", 11)
    with pytest.raises(P.ProtocolError, match="bad_encoding"):
        frame_to_tensor(frame, "f64", 5)
