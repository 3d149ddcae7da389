"""The shared-memory fields of the protocol and the fast header paths."""
from __future__ import annotations

import dataclasses

import msgpack
import pytest

from psgd.wire import protocol as P
from psgd.wire.payload import payload_frames


@pytest.mark.parametrize("req", [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1])
def test_request_id_reads_every_integer_width(req):
    frames = P.encode(P.Push(req=req, rank=3, seq=9, numel=4), [b"0123456789abcdef"])
    assert P.request_id(frames) == req == msgpack.unpackb(frames[0])[2]
    assert P.request_id([memoryview(frames[0])]) == req


def test_request_id_of_a_header_it_did_not_expect_falls_back_to_msgpack():
    header = msgpack.packb([1, 300, 77, {}])  # a type id above the fixint range
    assert P.request_id([header]) == 77


@pytest.mark.parametrize("record", [
    P.Register(req=4, rank=2, role="evaluator", fingerprint="f", shm="psgd-1-2-0123456789abcdef", shm_token="ab"),
    P.Welcome(req=5, shard=1, version=7, clock=3, last_seq=11, shm=True),
    P.PushPull(req=6, rank=1, seq=2, clock=3, read_version=4, encoding="bf16", scale=0.5, numel=8, shm=12),
    P.Params(req=7, version=8, clock=9, min_clock=1, numel=8, shm=True),
    P.StatsReply(req=8, stats={"a": 1}),
    P.Error(req=9, code="bad_shm", reason="stale"),
])
def test_records_round_trip_equal_with_every_field(record):
    frames = P.encode(record, [b"x" * 32] * payload_frames(record))
    back, payload = P.decode(frames)
    assert back == record and type(back) is type(record) and len(payload) == payload_frames(record)


def test_a_decoded_record_is_still_frozen_and_defaults_missing_fields():
    header = msgpack.packb([1, int(P.MsgType.PUSH), 3, {"rank": 2}])
    rec, _ = P.decode([header])
    assert rec == P.Push(req=3, rank=2) and rec.shm == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.rank = 5


def test_payload_frames_follow_the_shared_memory_fields():
    assert payload_frames(P.Push(shm=3)) == 0
    assert payload_frames(P.Push(shm=3, encoding="topk")) == 0
    assert payload_frames(P.Push()) == 1
    assert payload_frames(P.Params(shm=True)) == 0
    assert payload_frames(P.Params()) == 1
    assert payload_frames(P.Welcome(shm=True)) == 1  # registration replies always carry the parameters inline


@pytest.mark.parametrize("field, value", [("shm", True), ("shm", 1.5), ("shm", "3"), ("rank", True),
                                          ("scale", True), ("numel", 2.0)])
def test_exact_type_checks_refuse_look_alikes(field, value):
    header = msgpack.packb([1, int(P.MsgType.PUSH), 1, {field: value}])
    with pytest.raises(P.ProtocolError) as err:
        P.decode([header])
    assert err.value.code == "bad_field"


def test_an_int_is_accepted_for_a_float_field():
    rec, _ = P.decode([msgpack.packb([1, int(P.MsgType.PUSH), 1, {"scale": 2}])])
    assert rec.scale == 2
