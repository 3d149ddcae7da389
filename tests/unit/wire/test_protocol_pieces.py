"""A gradient in pieces (push during backward): the header fields, which a whole
push leaves out so that a shard predating them reads it, and their round trip."""
import msgpack
import pytest

from psgd.wire import protocol as P


def test_a_whole_push_carries_no_piece_fields():
    for record in (P.Push(rank=1, seq=2, numel=8), P.PushPull(rank=1, seq=2, numel=8, ahead=2)):
        fields = msgpack.unpackb(P.encode(record, [b"x" * 32])[0])[3]
        assert not set(P.PIECE_FIELDS) & set(fields)
        assert P.decode(P.encode(record, [b"x" * 32]))[0] == record


@pytest.mark.parametrize("record", [P.PushPull(req=3, rank=1, seq=2, numel=4, offset=12, held=True),
                                    P.PushPull(req=4, rank=1, seq=2, numel=4, offset=0, held=True),
                                    P.Push(req=5, rank=0, seq=9, numel=2, offset=6, held=False)])
def test_a_piece_round_trips_with_its_fields(record):
    frames = P.encode(record, [b"x" * 4 * record.numel])
    assert set(P.PIECE_FIELDS) <= set(msgpack.unpackb(frames[0])[3])
    back, payload = P.decode(frames)
    assert back == record and len(payload) == 1


def test_what_counts_as_a_piece():
    assert not P.is_piece(P.Push(numel=10), 10)
    assert P.is_piece(P.Push(numel=10, held=True), 10)   # held: answered later, whatever it covers
    assert P.is_piece(P.Push(numel=4, offset=6), 10)     # the last piece
    assert P.is_piece(P.Push(numel=4), 10)                # the first elements only
    with pytest.raises(P.ProtocolError, match="held"):
        P.decode([msgpack.packb([1, int(P.MsgType.PUSH), 1, {"held": 1}])])  # bool, not int
