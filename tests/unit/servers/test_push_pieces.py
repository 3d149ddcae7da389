"""The shard's assembly of a gradient sent in pieces (servers/push_decode.py)."""
import pytest
import torch

from psgd.servers.push_decode import PushDecoder
from psgd.wire import protocol as P
from psgd.wire.payload import tensor_frame


def piece(seq, values, offset, encoding="f32", scale=1.0, held=True):
    t = torch.tensor(values, dtype=P.ENCODINGS[encoding][0])
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
    assert d.piece(0, *piece(7, [1.0, 2.0], 0, encoding="f16", scale=0.5)) is None
    assert d.piece(0, *piece(7, [1.0, 2.0], 0, encoding="f16", scale=0.5)) is None
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
