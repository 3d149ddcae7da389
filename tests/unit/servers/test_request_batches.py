"""A shard serves every request queued at a wake-up as one batch (ShardServer._handle_batch):
each request is handled whole and in the order read, so a batch of pushes applies each once,
in order, and acknowledges each; a resend inside the batch is recognised; a bad request gets
its error and the rest are served; a SHUTDOWN stops the batch there, as it stops the loop."""
import torch

from psgd.config import load_config
from psgd.core.sharding import make_layout
from psgd.servers.shard import ShardServer
from psgd.wire import protocol as P
from psgd.wire.payload import tensor_frame

NUMEL = 8
LR = 0.5


def _shard():
    cfg = load_config(None, ["cluster.servers=1", "cluster.workers=2", "checkpoint.enabled=false",
                             "wire.shared_memory=off", f"optimizer.lr={LR}", "consistency.mode=asp"])
    layout = make_layout([("w", (NUMEL,))], 1)
    server = ShardServer(cfg, 0, "127.0.0.1:0", torch.zeros(NUMEL), layout.fingerprint, run_token="token")
    sent = []
    server._sock.send = server._sock.send_tracked = lambda identity, frames: sent.append((identity, P.decode(frames)[0]))
    for rank in (0, 1):
        server.handle(f"w{rank}".encode(), P.encode(P.Register(rank=rank, fingerprint=layout.fingerprint)))
    sent.clear()
    server._running = True  # as while serve() runs
    return server, sent


def _push(rank, seq, value, req):
    grad = torch.full((NUMEL,), float(value))
    record = P.Push(req=req, rank=rank, seq=seq, clock=seq, encoding="none", numel=NUMEL)
    return f"w{rank}".encode(), P.encode(record, [tensor_frame(grad)])


def test_a_batch_of_pushes_applies_each_once_in_order_and_acks_each():
    server, sent = _shard()
    try:
        batch = [_push(0, 0, 1.0, req=1), _push(1, 0, 2.0, req=2), _push(0, 1, 4.0, req=3),
                 _push(0, 1, 4.0, req=4),  # a resend of seq 1: acknowledged, not applied again
                 _push(1, 1, 8.0, req=5)]
        assert server._handle_batch(batch) == len(batch)
        acks = [(identity, rec) for identity, rec in sent]
        assert [rec.req for _, rec in acks] == [1, 2, 3, 4, 5]
        assert [identity for identity, _ in acks] == [b"w0", b"w1", b"w0", b"w0", b"w1"]
        assert all(isinstance(rec, P.Ack) for _, rec in acks)
        assert [rec.version for _, rec in acks] == [1, 2, 3, 3, 4]  # each ack after its own push
        assert [rec.applied for _, rec in acks] == [True, True, True, False, True]
        expected = torch.zeros(NUMEL)
        for value in (1.0, 2.0, 4.0, 8.0):  # applied in arrival order, each once
            expected.add_(torch.full((NUMEL,), value), alpha=-LR)
        assert torch.equal(server.state.params, expected)
        assert server.state.counters["duplicates"] == 1
    finally:
        server._sock.close()


def test_a_bad_request_in_a_batch_gets_its_error_and_the_rest_are_served():
    server, sent = _shard()
    try:
        batch = [_push(0, 0, 1.0, req=1), (b"w0", [b"not msgpack \xc1"]), _push(1, 0, 2.0, req=3)]
        assert server._handle_batch(batch) == 3
        assert [type(rec) for _, rec in sent] == [P.Ack, P.Error, P.Ack]
        assert sent[1][1].code == "bad_header" and server.state.version == 2
    finally:
        server._sock.close()


def test_a_shutdown_stops_the_batch_where_it_stands():
    server, sent = _shard()
    try:
        batch = [_push(0, 0, 1.0, req=1), (b"admin", P.encode(P.Shutdown(req=2, token="token"))),
                 _push(1, 0, 2.0, req=3)]
        assert server._handle_batch(batch) == 2
        assert [rec.req for _, rec in sent] == [1, 2] and server.state.version == 1 and not server._running
    finally:
        server._sock.close()
