"""The transport over loopback in this process: frames arrive whole, bad binds are clear errors."""
import pytest
import torch

from psgd.wire.shm.doorbell import Bells, ClientBell, ShardBell
from psgd.wire.transport import ServerSocket, ShardConnections, TransportError


@pytest.fixture
def server():
    s = ServerSocket("127.0.0.1:0")
    yield s
    s.close()


def _recv(server, timeout_ms=5000):
    got = server.recv(timeout_ms)
    assert got is not None, "nothing arrived"
    return got


def test_frames_travel_unchanged_both_ways():
    server = ServerSocket("127.0.0.1:0", copy_max_bytes=0)  # every large reply zero-copy and tracked
    conns = ShardConnections([server.address.replace("tcp://", "")])
    try:
        payload = torch.arange(100_000, dtype=torch.float32)  # > 64 KiB: sent zero-copy
        assert conns.send(0, [b"header", memoryview(payload.numpy())])
        identity, frames = _recv(server)
        assert bytes(frames[0]) == b"header"
        assert torch.equal(torch.frombuffer(bytearray(frames[1]), dtype=torch.float32), payload)
        tracker = server.send_tracked(identity, [b"reply", memoryview(payload.numpy())])
        assert tracker is not None and tracker.wait(5.0)
        (shard, reply), = conns.recv(timeout_ms=5000)
        assert shard == 0 and bytes(reply[0]) == b"reply" and bytes(reply[1]) == payload.numpy().tobytes()
    finally:
        conns.close()
        server.close()


def test_replies_up_to_the_copy_limit_are_copied_so_the_sender_may_change_them_at_once():
    payload = torch.arange(100_000, dtype=torch.float32)
    server = ServerSocket("127.0.0.1:0", copy_max_bytes=payload.numel() * 4)
    conns = ShardConnections([server.address])
    try:
        conns.send(0, [b"ping"])
        identity, _ = _recv(server)
        assert server.send_tracked(identity, [b"reply", memoryview(payload.numpy())]) is None
        sent = payload.clone()
        payload.add_(1.0)  # the message owns its own copy: this must not reach the peer
        (_, reply), = conns.recv(timeout_ms=5000)
        assert bytes(reply[1]) == sent.numpy().tobytes()
    finally:
        conns.close()
        server.close()


def test_small_replies_are_copied_and_need_no_tracker(server):
    conns = ShardConnections([server.address])
    try:
        conns.send(0, [b"ping"])
        identity, _ = _recv(server)
        assert server.send_tracked(identity, [b"pong", b"x" * 100]) is None
        assert conns.recv(timeout_ms=5000)[0][1][0] == b"pong"
    finally:
        conns.close()


def test_a_reply_to_a_vanished_peer_is_dropped_not_raised(server):
    assert server.send(b"\x00no-such-peer", [b"reply"]) is False


def test_recv_times_out_with_none(server):
    assert server.recv(10) is None


def test_binding_a_taken_address_is_a_transport_error(server):
    with pytest.raises(TransportError, match="cannot bind"):
        ServerSocket(server.address)



def test_recv_batch_takes_every_queued_message_in_each_senders_order_up_to_its_limit(server):
    senders = [ShardConnections([server.address]) for _ in range(3)]
    try:
        for i, conns in enumerate(senders):
            for k in range(4):
                assert conns.send(0, [f"{i}:{k}".encode()])
        got = []
        while len(got) < 12:
            more = server.recv_batch(5000, limit=5)
            assert 1 <= len(more) <= 5
            got += more
        assert server.recv_batch(10) == []
        assert _by_sender(got) == {f"{i}": [f"{i}:{k}" for k in range(4)] for i in range(3)}
    finally:
        for conns in senders:
            conns.close()


def test_one_wake_up_reads_every_rung_bell_and_hands_out_at_most_the_limit_per_call():
    server_bells = Bells()
    server = ServerSocket("127.0.0.1:0", bells=server_bells)
    clients = []
    try:
        for i in range(3):
            bell = ClientBell.create()
            server_bells.add(f"client{i}".encode(), ShardBell.open(bell.name))
            bell.settle()
            clients.append(bell)
        for i, bell in enumerate(clients):
            for k in range(4):
                assert bell.ring(f"{i}:{k}".encode())  # in the pipe once ring returns
        batches = [server.recv_batch(5000, limit=5) for _ in range(3)]
        assert [len(b) for b in batches] == [5, 5, 2] and server.rung == 12
        assert server.recv_batch(10) == []
        assert _by_sender([m for b in batches for m in b]) == {f"{i}": [f"{i}:{k}" for k in range(4)] for i in range(3)}
    finally:
        for bell in clients:
            bell.close()
        server.close()


def _by_sender(messages) -> dict:
    """The messages' texts ("sender:k") by the sender each names, in the order received."""
    seen: dict = {}
    for _identity, frames in messages:
        text = bytes(frames[0]).decode()
        seen.setdefault(text.split(":")[0], []).append(text)
    return seen


def test_recv_batch_stops_taking_large_messages_past_its_byte_cap(server, monkeypatch):
    import psgd.wire.transport.sockets as sockets
    monkeypatch.setattr(sockets, "RECV_BATCH_MAX_BYTES", 150_000)
    conns = ShardConnections([server.address])
    try:
        payload = b"x" * 100_000
        for k in range(3):
            assert conns.send(0, [f"{k}".encode(), payload])
        got = []
        while len(got) < 3:
            batch = server.recv_batch(5000)
            assert 1 <= len(batch) <= 2  # the second message passes the cap: the batch ends with it
            got += batch
        assert [bytes(frames[0]) for _, frames in got] == [b"0", b"1", b"2"]
    finally:
        conns.close()
