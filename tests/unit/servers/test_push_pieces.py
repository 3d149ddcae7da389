"""The shard's assembly of a gradient sent in pieces (servers/push_decode.py)."""
import pytest
import torch

from psgd.servers.push_decode import PushDecoder
from psgd.wire import protocol as P
from psgd.wire.codecs import CODECS
from psgd.wire.payload import tensor_frame


def piece(seq, values, offset, encoding="none", scale=1.0, held=True):
    t = torch.tensor(values, dtype=CODECS[encoding].wire_dtype)
    return P.Push(rank=0, seq=seq, numel=t.numel(), offset=offset, held=held, encoding=encoding,
                  scale=scale), [bytes(tensor_frame(t))]


def test_pieces_in_any_order_give_the_whole_gradient_once_they_tile_it():
    d = PushDecoder(6, segments=None)
    assert d.piece(0, *piece(1, [5.0, 6.0], 4)) is None
    assert d.piece(0, *piece(1, [1.0, 2.0], 0)) is None
    got = d.piece(0, *piece(1, [3.0, 4.0], 2, held=False))
    assert torch.equal(got, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))


def test_a_scaled_piece_is_decoded_to_fp32_and_a_repeated_piece_counts_once():
    d = PushDecoder(4, segments=None)
    assert d.piece(0, *piece(7, [1.0, 2.0], 0, encoding="fp16", scale=0.5)) is None
    assert d.piece(0, *piece(7, [1.0, 2.0], 0, encoding="fp16", scale=0.5)) is None
    assert torch.equal(d.piece(0, *piece(7, [8.0, 9.0], 2)), torch.tensor([0.5, 1.0, 8.0, 9.0]))


def test_overlapping_pieces_or_a_newer_push_never_complete_a_gradient():
    d = PushDecoder(4, segments=None)
    assert d.piece(0, *piece(1, [1.0, 2.0, 3.0], 0)) is None
    assert d.piece(0, *piece(1, [9.0, 9.0], 1)) is None  # [0, 3) and [1, 3): no tiling of [0, 4)
    assert d.piece(0, *piece(2, [4.0], 3)) is None        # push 2 starts over: push 1's pieces are gone
    assert d.piece(0, *piece(2, [1.0, 2.0, 3.0], 0)) is not None
    assert d.piece(1, *piece(2, [1.0], 3)) is None        # another rank assembles its own


@pytest.mark.parametrize("values, offset, code", [([1.0, 2.0], 3, "bad_size"), ([1.0], -1, "bad_size")])
def test_a_piece_outside_the_shard_is_refused(values, offset, code):
    with pytest.raises(P.ProtocolError) as exc:
        PushDecoder(4, segments=None).piece(0, *piece(1, values, offset))
    assert exc.value.code == code


def test_pieces_in_a_segment_are_copied_to_their_place_and_a_stale_one_is_refused():
    """A piece in shared memory names the payload's generation and its offset: the shard copies
    those bytes alone. A generation the client has moved past is refused, and the span the
    failed copy wrote is forgotten, so it never completes a gradient."""
    from psgd.wire.shm.links import ShardSegments
    from psgd.wire.shm.segment import Segment
    client = Segment.create(4 * 6, 4 * 6)
    segments = ShardSegments(4 * 6, enabled=True)
    try:
        assert segments.attach(b"w0", "worker", 0, client.name, client.token_hex)
        d = PushDecoder(6, segments)
        region = client.request_tensor(torch.float32, 6)
        region[4:].copy_(torch.tensor([5.0, 6.0]))
        gen, _ = client.put_request(region)  # published once: later pieces land beside it
        def in_segment(offset, held=True):
            return P.Push(rank=0, seq=1, numel=2, offset=offset, held=held, encoding="none", shm=gen)
        assert d.piece(0, in_segment(4), [], b"w0") is None
        region[:2].copy_(torch.tensor([1.0, 2.0]))
        assert d.piece(0, in_segment(0), [], b"w0") is None
        client.request_tensor(torch.float32, 6)  # the client starts its next payload
        with pytest.raises(P.ProtocolError) as exc:  # [0, 2) again, from a payload that is gone
            d.piece(0, in_segment(0), [], b"w0")
        assert exc.value.code == "bad_shm"
        assert d.piece(0, *piece(1, [3.0, 4.0], 2, held=False)) is None  # [0, 2) no longer counts
        got = d.piece(0, *piece(1, [1.0, 2.0], 0, held=False))
        assert torch.equal(got, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        with pytest.raises(P.ProtocolError) as exc:  # only fp32 travels in a segment
            d.piece(0, P.Push(rank=0, seq=2, numel=2, offset=0, encoding="fp16", shm=gen), [], b"w0")
        assert exc.value.code == "bad_encoding"
    finally:
        segments.release(b"w0")
        client.close()
