"""Both sides' bookkeeping of shared-memory connections: offers, acceptance,
replacement on re-registration, and falling back to inline payloads."""
from __future__ import annotations

import os

import pytest
import torch

from psgd.wire.shm.links import ClientSegments, PayloadCache, ShardSegments, shared_memory_wanted, worth_sharing


def _read(shard: ShardSegments, identity: bytes, gen: int):
    out = torch.empty(100)
    return out if shard.request(identity, gen, out) else None


def _register(client: ClientSegments, shard: ShardSegments, s: int, identity: bytes, rank: int = 0) -> bool:
    offer = client.offer(s)
    ok = shard.attach(identity, "worker", rank, offer.get("shm", ""), offer.get("shm_token", ""))
    client.settle(s, ok)
    return ok


def test_an_accepted_offer_carries_payloads_both_ways_and_gives_up_the_name():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    assert _register(client, shard, 0, b"id-a")
    assert not client.segment(0).linked  # the name is given up as soon as the shard answered
    g = torch.randn(100)
    gen = PayloadCache(client).generation(0, g)
    assert torch.equal(_read(shard, b"id-a", gen), g)
    assert _read(shard, b"id-b", gen) is None  # another connection has no segment
    p = torch.randn(100)
    assert shard.reply(b"id-a", 5, p)
    assert torch.equal(client.segment(0).reply_view(5, 400).view(torch.float32), p)
    client.close()


def test_a_refused_offer_leaves_the_connection_inline_and_no_segment():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(800, enabled=True)  # a different model size: too small
    assert not _register(client, shard, 0, b"id-a")
    assert client.segment(0) is None and not client._offered
    assert shard.refused == {"too_small": 1}
    assert PayloadCache(client).generation(0, torch.zeros(100)) == 0
    assert not shard.reply(b"id-a", 1, torch.zeros(200))


def test_off_on_either_side_means_inline():
    off_client = ClientSegments([400], enabled=False, min_bytes=0)
    assert off_client.offer(0) == {}
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=False)
    assert not _register(client, shard, 0, b"id-a")
    assert client.segment(0) is None and not client._offered


@pytest.mark.parametrize("nbytes, min_bytes, shared", [(0, 0, True), (4, 0, True), (4095, 4096, False),
                                                       (4096, 4096, True), (1 << 20, 4096, True)])
def test_only_shards_of_at_least_the_threshold_use_shared_memory(nbytes, min_bytes, shared):
    assert worth_sharing(nbytes, min_bytes) is shared


def test_a_connection_below_the_threshold_offers_nothing_and_stays_inline():
    client = ClientSegments([400, 8000, 4000], enabled=True, min_bytes=4000)
    shard_small, shard_big = ShardSegments(400, enabled=True), ShardSegments(8000, enabled=True)
    assert client.offer(0) == {} and not _register(client, shard_small, 0, b"small")
    assert _register(client, shard_big, 1, b"big")
    assert "shm" in client.offer(2)                    # exactly at the threshold: offered
    assert [client.segment(s) is not None for s in range(2)] == [False, True]
    assert PayloadCache(client).generation(0, torch.zeros(100)) == 0
    with pytest.raises(ValueError, match=">= 0"):
        worth_sharing(10, -1)


def test_a_rank_registering_again_replaces_its_segment():
    shard = ShardSegments(400, enabled=True)
    first = ClientSegments([400], enabled=True, min_bytes=0)
    assert _register(first, shard, 0, b"old", rank=3)
    second = ClientSegments([400], enabled=True, min_bytes=0)  # the restarted worker
    assert _register(second, shard, 0, b"new", rank=3)
    assert len(shard) == 1
    assert _read(shard, b"old", 1) is None
    gen = PayloadCache(second).generation(0, torch.ones(100))
    assert torch.equal(_read(shard, b"new", gen), torch.ones(100))


def test_a_register_resent_after_its_offer_was_settled_keeps_the_segment_and_the_bell():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    offer = client.offer(0)
    assert shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"])
    assert shard.open_bell(b"id-a", offer["bell"])
    client.settle(0, True, bell_opened=True)  # the client gave up the segment's name and the bell's shard ends
    held, bell = client.segment(0), shard.bells.get(b"id-a")
    # The same REGISTER again on the same connection (a retry): settled the same way, nothing released.
    assert shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"])
    assert shard.open_bell(b"id-a", offer["bell"]) and shard.bells.get(b"id-a") is bell
    client.settle(0, True, bell_opened=True)
    assert client.segment(0) is held and len(shard) == 1
    gen = PayloadCache(client).generation(0, torch.ones(100))
    assert torch.equal(_read(shard, b"id-a", gen), torch.ones(100))
    assert client.bells.get(0).ring(b"h") and shard.bells.get(b"id-a").read() == [b"h"]
    # Another rank, or another token, on that connection is not the same offer: it is released.
    assert not shard.attach(b"id-a", "worker", 1, offer["shm"], offer["shm_token"])
    assert len(shard) == 0 and len(shard.bells) == 0
    client.close()


def test_a_retried_register_keeps_the_segment_after_its_name_was_reused_and_another_request_does_not():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    offer = client.offer(0)
    assert shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"], req=7)
    client.settle(0, True)
    # The client's next descriptor takes the number the segment's name pointed at.
    reused = os.open(os.devnull, os.O_RDONLY)
    try:
        assert f"-{reused}" in offer["shm"]
        # The transport's retry of request 7 is the same offer: kept.
        assert shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"], req=7)
        gen = PayloadCache(client).generation(0, torch.ones(100))
        assert torch.equal(_read(shard, b"id-a", gen), torch.ones(100))
        # Another request naming what is now another file is another offer, checked on its own.
        assert not shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"], req=8)
        assert len(shard) == 0 and shard.refused == {"not_ours": 1}
    finally:
        os.close(reused)
        client.close()


def test_payload_written_once_per_request_and_again_into_a_new_segment():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    _register(client, shard, 0, b"a")
    cache = PayloadCache(client)
    g = torch.randn(100)
    gen = cache.generation(0, g)
    assert cache.generation(0, g) == gen  # a resend names the same bytes
    _register(client, shard, 0, b"a")     # the shard restarted: a new segment
    gen2 = cache.generation(0, g)
    assert torch.equal(_read(shard, b"a", gen2), g)


@pytest.mark.parametrize("setting, secured, want", [("auto", False, True), ("auto", True, False),
                                                    ("off", False, False)])
def test_shared_memory_wanted(setting, secured, want):
    assert shared_memory_wanted(setting, secured) is want


def test_shared_memory_setting_is_checked():
    with pytest.raises(ValueError, match="auto or off"):
        shared_memory_wanted("on", False)


def test_a_released_connection_lets_go_of_its_file_and_falls_back_inline():
    shard = ShardSegments(400, enabled=True)
    worker, evaluator = (ClientSegments([400], enabled=True, min_bytes=0) for _ in range(2))
    assert _register(worker, shard, 0, b"w", rank=1)
    offer = evaluator.offer(0)
    evaluator.settle(0, shard.attach(b"e", "evaluator", 0, offer["shm"], offer["shm_token"]))
    fds = len(os.listdir("/proc/self/fd"))
    shard.release_rank("worker", 1)
    assert len(shard) == 1 and len(os.listdir("/proc/self/fd")) == fds - 1
    assert _read(shard, b"w", PayloadCache(worker).generation(0, torch.ones(100))) is None
    assert not shard.reply(b"w", 1, torch.ones(100))
    assert shard.reply(b"e", 1, torch.ones(100))      # used since the last sweep: kept
    assert shard.release_idle("evaluator") == 0 and len(shard) == 1
    assert shard.release_idle("evaluator") == 1 and len(shard) == 0   # idle for a whole sweep
    assert not shard.reply(b"e", 2, torch.ones(100))


def test_a_segment_comes_with_a_doorbell_that_goes_when_the_connection_does():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    offer = client.offer(0)
    assert shard.attach(b"id-a", "worker", 0, offer["shm"], offer["shm_token"])
    assert not shard.open_bell(b"id-b", offer["bell"])  # only a connection with a segment gets one
    assert shard.open_bell(b"id-a", offer["bell"])
    client.settle(0, True, bell_opened=True)
    assert client.bells.get(0).ring(b"h") and shard.bells.get(b"id-a").read() == [b"h"]
    shard.release(b"id-a")  # the connection left: its bell closes, and the client sees it at once
    assert len(shard.bells) == 0 and not client.bells.get(0).ring(b"h")
    client.close()
    assert len(client.bells) == 0


def test_a_bell_the_shard_did_not_open_is_closed_and_the_segment_kept():
    client = ClientSegments([400], enabled=True, min_bytes=0)
    shard = ShardSegments(400, enabled=True)
    assert _register(client, shard, 0, b"id-a")  # a shard that predates bells: it never opens one
    assert client.segment(0) is not None and len(client.bells) == 0 and not client._offered_bells
    client.close()


def test_bells_leave_most_descriptors_to_the_sockets(monkeypatch):
    import psgd.wire.shm.links as links
    monkeypatch.setattr(links, "_descriptor_limit", lambda: 16)  # room for two bells (a quarter, two each)
    shard = ShardSegments(400, enabled=True)
    clients = [ClientSegments([400], enabled=True, min_bytes=0) for _ in range(3)]
    opened = []
    for rank, client in enumerate(clients):
        offer = client.offer(0)
        assert shard.attach(b"id-%d" % rank, "worker", rank, offer["shm"], offer["shm_token"])
        opened.append(shard.open_bell(b"id-%d" % rank, offer["bell"]))
        client.settle(0, True, opened[-1])
    assert opened == [True, True, False] and shard.refused == {"bell_limit": 1}
    for client in clients:
        client.close()
    shard.close()
