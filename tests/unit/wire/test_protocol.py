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
    P.Push(req=4, rank=2, seq=5, clock=5, read_version=40, encoding="fp16", scale=0.5, numel=100),
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


@pytest.mark.parametrize("encoding", ["none", "fp16", "bf16"])
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
        frame_to_tensor(frame, "none", 11)
    with pytest.raises(P.ProtocolError, match="bad_encoding"):
        frame_to_tensor(frame, "f64", 5)


def test_a_shape_once_accepted_still_refuses_a_wrong_type_or_name():
    """Decode remembers field shapes it accepted; a message with the same names but another
    type, or one more name, is a different shape and is checked (and refused) in full."""
    good = P.encode(P.Pull(req=1, rank=2, clock=3))
    P.decode(good)
    P.decode(good)  # now a known shape
    for fields in ({"rank": "2", "clock": 3, "slot": 0}, {"rank": 2, "clock": 3.0, "slot": 0},
                   {"rank": 2, "clock": 3, "slot": 0, "bogus": 1}):
        with pytest.raises(P.ProtocolError) as info:
            P.decode([header(1, int(P.MsgType.PULL), 1, fields)])
        assert info.value.code == "bad_field"


def test_remembered_shapes_are_bounded(monkeypatch):
    monkeypatch.setattr(P, "_GOOD_SHAPES", set())
    names = [n for n in P._HEADER_FIELDS[P.MsgType.PUSH_PULL] if n != "runs"]
    defaults = P._DEFAULTS[P.MsgType.PUSH_PULL]
    for n in range(P.MAX_GOOD_SHAPES + 50):  # each subset of the fields is a shape of its own
        fields = {name: defaults[name] for bit, name in enumerate(names) if n >> bit & 1}
        record, _ = P.decode([header(1, int(P.MsgType.PUSH_PULL), 1, fields)])
        assert all(getattr(record, k) == v for k, v in fields.items())
    assert len(P._GOOD_SHAPES) == P.MAX_GOOD_SHAPES


@pytest.mark.parametrize("cls, fields", [
    (P.Pull, {"req": 3, "rank": 1, "clock": 9, "slot": 1}),
    (P.PushPull, {"req": 5, "rank": 2, "seq": 6, "clock": 6, "read_version": 41, "numel": 100, "shm": 4,
                  "ahead": 2}),
    (P.Params, {"req": 6, "version": 3, "clock": 2, "min_clock": 1, "numel": 10, "shm": True}),
    (P.Ack, {"req": 7, "version": 3, "applied": False, "staleness": 2}),
])
def test_build_makes_the_record_its_class_makes(cls, fields):
    built = P.build(cls, **fields)
    assert built == cls(**fields) and type(built) is cls
    assert P.encode(built) == P.encode(cls(**fields))
    with pytest.raises(TypeError, match="bogus"):
        P.build(cls, bogus=1, **fields)
