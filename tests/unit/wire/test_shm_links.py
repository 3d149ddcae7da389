"""Both sides' bookkeeping of shared-memory connections: offers, acceptance,
replacement on re-registration, and falling back to inline payloads."""
from __future__ import annotations

import os

import pytest
import torch

from psgd.wire.shm_links import ClientSegments, PayloadCache, ShardSegments, shared_memory_wanted


def _read(shard: ShardSegments, identity: bytes, gen: int):
    out = torch.empty(100)
    return out if shard.request(identity, gen, out) else None


def _register(client: ClientSegments, shard: ShardSegments, s: int, identity: bytes, rank: int = 0) -> bool:
    offer = client.offer(s)
    ok = shard.attach(identity, "worker", rank, offer.get("shm", ""), offer.get("shm_token", ""))
    client.settle(s, ok)
    return ok


def test_an_accepted_offer_carries_payloads_both_ways_and_leaves_no_file(tmp_path):
    client = ClientSegments([400], enabled=True, directory=tmp_path)
    shard = ShardSegments(400, enabled=True, directory=tmp_path)
    assert _register(client, shard, 0, b"id-a")
    assert os.listdir(tmp_path) == []  # unlinked as soon as the shard answered
    g = torch.randn(100)
    gen = PayloadCache(client).generation(0, g)
    assert torch.equal(_read(shard, b"id-a", gen), g)
    assert _read(shard, b"id-b", gen) is None  # another connection has no segment
    p = torch.randn(100)
    assert shard.reply(b"id-a", 5, p)
    assert torch.equal(client.segment(0).reply_view(5, 400).view(torch.float32), p)
    client.close()


def test_a_refused_offer_leaves_the_connection_inline_and_no_file(tmp_path):
    client = ClientSegments([400], enabled=True, directory=tmp_path)
    shard = ShardSegments(800, enabled=True, directory=tmp_path)  # a different model size: too small
    assert not _register(client, shard, 0, b"id-a")
    assert client.segment(0) is None and os.listdir(tmp_path) == []
    assert shard.refused == {"too_small": 1}
    assert PayloadCache(client).generation(0, torch.zeros(100)) == 0
    assert not shard.reply(b"id-a", 1, torch.zeros(200))


def test_off_on_either_side_means_inline(tmp_path):
    off_client = ClientSegments([400], enabled=False, directory=tmp_path)
    assert off_client.offer(0) == {} and os.listdir(tmp_path) == []
    client = ClientSegments([400], enabled=True, directory=tmp_path)
    shard = ShardSegments(400, enabled=False, directory=tmp_path)
    assert not _register(client, shard, 0, b"id-a")
    assert os.listdir(tmp_path) == []


def test_a_rank_registering_again_replaces_its_segment(tmp_path):
    shard = ShardSegments(400, enabled=True, directory=tmp_path)
    first = ClientSegments([400], enabled=True, directory=tmp_path)
    assert _register(first, shard, 0, b"old", rank=3)
    second = ClientSegments([400], enabled=True, directory=tmp_path)  # the restarted worker
    assert _register(second, shard, 0, b"new", rank=3)
    assert len(shard) == 1
    assert _read(shard, b"old", 1) is None
    gen = PayloadCache(second).generation(0, torch.ones(100))
    assert torch.equal(_read(shard, b"new", gen), torch.ones(100))


def test_payload_written_once_per_request_and_again_into_a_new_segment(tmp_path):
    client = ClientSegments([400], enabled=True, directory=tmp_path)
    shard = ShardSegments(400, enabled=True, directory=tmp_path)
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


def test_a_released_connection_lets_go_of_its_file_and_falls_back_inline(tmp_path):
    shard = ShardSegments(400, enabled=True, directory=tmp_path)
    worker, evaluator = (ClientSegments([400], enabled=True, directory=tmp_path) for _ in range(2))
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
