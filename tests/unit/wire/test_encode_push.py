"""protocol.encode_push: a push header built straight from its values is the record's own header."""
import dataclasses

import msgpack
import pytest

from psgd.wire import protocol as P

CASES = [
    dict(),  # every field at its default
    dict(seq=7, clock=3, read_version=11, scale=0.5, numel=100, nnz=4, shm=9, step_s=0.25, steps=2),
    dict(numel=10, offset=20, held=True),  # a piece the shard holds
    dict(numel=10, offset=20, held=False),  # the last piece
    dict(numel=10, offset=0, held=True),  # the first piece
    dict(encoding="runs", runs=[["fp16", 1.0, 0], ["topk", 1.0, 3]]),
]


@pytest.mark.parametrize("kind", [P.Push, P.PushPull])
@pytest.mark.parametrize("values", CASES)
def test_encode_push_decodes_to_the_record_with_its_fields_in_the_records_order(kind, values):
    extra = dict(ahead=2, slot=1) if kind is P.PushPull else {}
    record = P.build(kind, req=300, rank=5, **values, **extra)
    frames = P.encode_push(kind, [b"payload"], **record.__dict__)
    back, payload = P.decode(frames)
    assert back == record and type(back) is kind and payload == [b"payload"]
    sent = msgpack.unpackb(frames[0])[3]
    order = [f.name for f in dataclasses.fields(kind) if f.name in sent]
    assert list(sent) == order  # the shard's known-shape cache sees one shape per kind of push
    whole = not (record.held or record.offset)
    assert ("offset" in sent, "held" in sent, "runs" in sent) == (not whole, not whole, bool(record.runs))


def test_encode_of_a_push_record_is_encode_push():
    record = P.build(P.PushPull, req=1, rank=2, seq=3, clock=4, numel=5, ahead=2, slot=1)
    assert P.encode(record, [b"x"]) == P.encode_push(P.PushPull, [b"x"], **record.__dict__)


def test_encode_push_refuses_other_records():
    with pytest.raises(TypeError, match="PUSH and PUSH_PULL"):
        P.encode_push(P.Pull, [], req=1, rank=0, seq=0, clock=0, read_version=0, encoding="none", scale=1.0, numel=1)


def test_encode_push_from_several_threads_at_once_keeps_each_header_whole():
    import threading

    bad = []

    def sender(rank):
        for seq in range(500):
            frames = P.encode_push(P.Push, [], req=seq, rank=rank, seq=seq, clock=seq, read_version=rank,
                                   encoding="none", scale=1.0, numel=seq + rank)
            rec, _ = P.decode(frames)
            if (rec.rank, rec.seq, rec.numel) != (rank, seq, seq + rank):
                bad.append((rank, seq))

    threads = [threading.Thread(target=sender, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
