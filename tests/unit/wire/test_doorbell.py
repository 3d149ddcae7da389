"""Doorbells: framed headers over a pair of pipes, opened by name like a segment,
and either side's exit seen by the other at once."""
import os
import struct

import pytest

from psgd.wire.shm.doorbell import MAX_MESSAGE_BYTES, BellError, Bells, ClientBell, ShardBell, parse_bell_name, ring
from psgd.wire.transport import ServerSocket, ShardConnections


@pytest.fixture
def pair():
    client = ClientBell.create()
    shard = ShardBell.open(client.name)
    client.settle()
    yield client, shard
    client.close()
    shard.close()


def test_headers_travel_whole_both_ways_and_several_arrive_in_one_read(pair):
    client, shard = pair
    assert client.ring(b"first") and client.ring(memoryview(b"x" * MAX_MESSAGE_BYTES)) and client.ring(b"")
    assert shard.read() == [b"first", b"x" * MAX_MESSAGE_BYTES, b""]
    assert shard.read() == []  # nothing more waiting: not an end of pipe
    assert shard.ring(b"reply")
    assert client.read() == [b"reply"]


def test_a_message_over_the_atomic_size_is_refused_and_the_bell_stays_usable(pair):
    client, shard = pair
    assert not client.ring(b"x" * (MAX_MESSAGE_BYTES + 1))
    assert not client.dead and client.ring(b"ok") and shard.read() == [b"ok"]


def test_a_full_pipe_takes_nothing_and_the_bell_stays_usable(pair):
    client, shard = pair
    sent = 0
    while client.ring(b"y" * 1000):
        sent += 1
    assert sent > 0 and not client.dead
    got = []
    while len(got) < sent:
        got += shard.read()
    assert got == [b"y" * 1000] * sent  # every message whole: none split by the full pipe
    assert client.ring(b"again") and shard.read() == [b"again"]


def test_the_shards_exit_is_seen_by_the_client_at_once(pair):
    client, shard = pair
    shard.close()
    assert not client.ring(b"request") and client.dead  # EPIPE: no reader
    assert client.read() is None


def test_the_clients_exit_is_seen_by_the_shard_at_once(pair):
    client, shard = pair
    client.close()
    assert shard.read() is None and shard.dead
    assert not shard.ring(b"reply")


def test_a_writer_that_breaks_the_framing_kills_the_bell(pair):
    client, shard = pair
    os.write(client.write_fd, struct.pack("<I", MAX_MESSAGE_BYTES + 1) + b"junk")
    assert shard.read() is None and shard.dead


def test_a_message_split_across_reads_is_kept_until_whole(pair):
    client, shard = pair
    os.write(client.write_fd, struct.pack("<I", 5) + b"he")
    assert shard.read() == []
    os.write(client.write_fd, b"llo")
    assert shard.read() == [b"hello"]


def test_opening_refuses_what_is_not_a_bell_of_this_user(tmp_path):
    with pytest.raises(BellError, match="bad_name"):
        ShardBell.open("psgd-1-2")
    with pytest.raises(BellError, match="not_here"):
        ShardBell.open("psgd-999999999-3-4")
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(BellError, match="not_ours"):  # a regular file, not a pipe
            ShardBell.open(f"psgd-{os.getpid()}-{fd}-{fd}")
    finally:
        os.close(fd)
    assert parse_bell_name(f"psgd-{os.getpid()}-7-9") == (os.getpid(), 7, 9)


def test_a_table_drops_a_dead_bell_when_it_cannot_ring(pair):
    client, shard = pair
    bells = Bells()
    bells.add(0, client)
    assert ring(bells, 0, [b"h"]) and shard.read() == [b"h"]
    assert not ring(bells, 0, [b"h", b"payload"])  # tensor frames never ring
    shard.close()
    assert not ring(bells, 0, [b"h"]) and len(bells) == 0 and bells.dropped == 1


def test_sockets_ring_header_only_messages_and_keep_the_rest_on_zeromq():
    server_bells, client_bells = Bells(), Bells()
    server = ServerSocket("127.0.0.1:0", bells=server_bells)
    conns = ShardConnections([server.address], bells=client_bells)
    try:
        assert conns.send(0, [b"hello"])  # no bell yet: ZeroMQ
        identity, frames = server.recv(5000)
        assert bytes(frames[0]) == b"hello" and server.rung == 0
        bell = ClientBell.create()
        server_bells.add(identity, ShardBell.open(bell.name))
        bell.settle()
        client_bells.add(0, bell)
        assert conns.send(0, [b"rung"]) and conns.send(0, [b"with", b"payload"])
        got = [server.recv(5000) for _ in range(2)]
        assert sorted(bytes(f[0]) for _, f in got) == [b"rung", b"with"]
        assert {i for i, _ in got} == {identity} and server.rung == 1
        assert server.send(identity, [b"reply"]) and server.send(identity, [b"big", b"frame"])
        replies = []
        while len(replies) < 2:
            replies += conns.recv(5000)
        assert sorted(bytes(f[0]) for _, f in replies) == [b"big", b"reply"]
        server_bells.close()  # the shard side goes away: the client's next request falls back to ZeroMQ
        assert conns.send(0, [b"after"]) and len(client_bells) == 0
        identity2, frames = server.recv(5000)
        assert identity2 == identity and bytes(frames[0]) == b"after"
    finally:
        conns.close()
        server.close()
