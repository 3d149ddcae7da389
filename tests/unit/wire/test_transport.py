"""The transport over loopback in this process: frames arrive whole, bad binds are clear errors."""
import pytest
import torch

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
