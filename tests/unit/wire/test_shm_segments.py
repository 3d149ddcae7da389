"""Shared-memory segments: bytes in and out, the generation and reply-order
checks, what attach refuses, and reclaiming the files of dead processes."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from psgd.wire import shm
from psgd.wire.shm import Segment, ShmError, process_start_time, reclaim
from psgd.wire.shm_attached import AttachedSegment


def read(shard: AttachedSegment, gen: int, nbytes: int, dtype=torch.float32):
    """The request payload copied out, or None when refused."""
    if nbytes < 0 or nbytes % dtype.itemsize:
        return None
    out = torch.empty(nbytes // dtype.itemsize, dtype=dtype)
    return out if shard.read_request(gen, out) else None


@pytest.fixture
def pair(tmp_path):
    client = Segment.create(4 * 1000, 4 * 1000, tmp_path)
    shard = AttachedSegment.attach(client.name, client.token_hex, 4 * 1000, 4 * 1000, tmp_path)
    yield client, shard
    shard.close()
    client.close()


def test_gradient_and_parameters_cross_the_segment_bit_for_bit(pair):
    client, shard = pair
    g = torch.randn(1000)
    gen, nbytes = client.put_request(g)
    seen = read(shard, gen, nbytes, torch.float32)
    assert torch.equal(seen, g)
    p = torch.randn(1000)
    assert shard.put_reply(7, p)
    back = client.reply_view(7, nbytes).view(torch.float32)
    assert torch.equal(back, p)
    # The shard's copy is its own: a later write into the region does not show through.
    g2 = torch.randn(1000)
    gen2, _ = client.put_request(g2)
    assert gen2 == gen + 1 and torch.equal(read(shard, gen2, nbytes, torch.float32), g2)
    assert torch.equal(seen, g)


def test_a_payload_of_a_smaller_encoding_uses_the_region_front(pair):
    client, shard = pair
    h = torch.randn(1000).to(torch.float16)
    gen, nbytes = client.put_request(h)
    assert nbytes == 2000
    assert torch.equal(read(shard, gen, nbytes, torch.float16), h)


def test_a_stale_or_oversized_request_is_not_read(pair):
    client, shard = pair
    gen, nbytes = client.put_request(torch.ones(1000))
    client.put_request(torch.zeros(1000))  # overwritten: the first descriptor is stale
    assert read(shard, gen, nbytes) is None
    assert read(shard, gen + 1, 4 * 1000 + 4) is None
    assert read(shard, gen + 1, -4) is None
    assert read(shard, gen + 7, nbytes) is None
    with pytest.raises(ValueError, match="exceeds"):
        client.put_request(torch.zeros(1001))


def test_a_reply_for_an_older_request_never_overwrites_a_newer_one(pair):
    client, shard = pair
    newer = torch.full((1000,), 2.0)
    assert shard.put_reply(10, newer)
    assert not shard.put_reply(9, torch.zeros(1000))    # a late resend of an older request
    assert not shard.put_reply(10, torch.zeros(1000))   # the same request answered twice
    assert torch.equal(client.reply_view(10, 4000).view(torch.float32), newer)
    assert client.reply_view(9, 4000) is None            # stamped for request 10, not 9
    assert not shard.put_reply(11, torch.zeros(1001))   # larger than the region


@pytest.mark.parametrize("name, token, sizes, code", [
    ("../../etc/passwd", None, (0, 0), "bad_name"),
    ("psgd-1-2-nothex", None, (0, 0), "bad_name"),
    ("psgd-1-2-0123456789abcdef", None, (0, 0), "not_here"),
    (None, "00" * 16, (0, 0), "bad_token"),
    (None, "zz", (0, 0), "bad_token"),
    (None, None, (4001, 0), "too_small"),
    (None, None, (0, 4001), "too_small"),
])
def test_attach_refuses_what_is_not_this_clients_segment(tmp_path, name, token, sizes, code):
    client = Segment.create(4000, 4000, tmp_path)
    try:
        with pytest.raises(ShmError) as err:
            AttachedSegment.attach(name or client.name, token or client.token_hex, *sizes, tmp_path)
        assert err.value.code == code
    finally:
        client.close()


def test_attach_refuses_a_symlink_and_a_truncated_file(tmp_path):
    client = Segment.create(4000, 4000, tmp_path)
    try:
        link = tmp_path / "psgd-1-2-0123456789abcdef"
        link.symlink_to(client.path)
        with pytest.raises(ShmError) as err:
            AttachedSegment.attach(link.name, client.token_hex, 0, 0, tmp_path)
        assert err.value.code == "not_here"
        os.truncate(client.path, 4096 + 100)  # header intact, regions cut short
        with pytest.raises(ShmError) as err:
            AttachedSegment.attach(client.name, client.token_hex, 0, 0, tmp_path)
        assert err.value.code == "bad_segment"
    finally:
        client.close()


def test_the_mapping_outlives_the_file(tmp_path):
    client = Segment.create(400, 400, tmp_path)
    shard = AttachedSegment.attach(client.name, client.token_hex, 400, 400, tmp_path)
    client.unlink()
    assert not client.linked and os.listdir(tmp_path) == []
    gen, n = client.put_request(torch.arange(100, dtype=torch.float32))
    assert torch.equal(read(shard, gen, n, torch.float32), torch.arange(100, dtype=torch.float32))
    shard.close()
    client.close()


def test_close_unlinks_only_on_the_creating_side(tmp_path):
    client = Segment.create(40, 40, tmp_path)
    shard = AttachedSegment.attach(client.name, client.token_hex, 40, 40, tmp_path)
    shard.close()
    assert client.linked
    client.close()
    assert not client.linked


def test_close_with_a_live_view_keeps_the_view_valid(tmp_path):
    client = Segment.create(40, 40, tmp_path)
    shard = AttachedSegment.attach(client.name, client.token_hex, 40, 40, tmp_path)
    shard.put_reply(1, torch.full((10,), 3.0))
    view = client.reply_view(1, 40).view(torch.float32)
    client.close()
    shard.close()
    assert torch.equal(view, torch.full((10,), 3.0))


def _dead_process() -> tuple[int, int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = None
    while start is None:
        start = process_start_time(proc.pid)
    proc.kill()
    proc.wait()
    return proc.pid, start


def test_reclaim_removes_segments_of_dead_processes_only(tmp_path):
    pid, start = _dead_process()
    dead = tmp_path / f"psgd-{pid}-{start}-0123456789abcdef"
    reused = tmp_path / f"psgd-{os.getpid()}-{process_start_time(os.getpid()) + 1}-0123456789abcdef"
    other = tmp_path / "psgd-not-a-segment"
    for path in (dead, reused, other):
        path.write_bytes(b"x")
    live = Segment.create(40, 40, tmp_path)  # create reclaims first
    try:
        assert sorted(os.listdir(tmp_path)) == sorted([live.name, other.name])
        assert reclaim(tmp_path) == []
    finally:
        live.close()


def test_a_sigkilled_creator_leaves_a_file_that_the_next_create_reclaims(tmp_path):
    code = ("import sys, time; from psgd.wire.shm import Segment; "
            f"s = Segment.create(4096, 4096, {str(tmp_path)!r}); print(s.name, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    name = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    proc.stdout.close()
    assert os.listdir(tmp_path) == [name]  # SIGKILL ran no cleanup
    fresh = Segment.create(40, 40, tmp_path)
    assert os.listdir(tmp_path) == [fresh.name]
    fresh.close()
    assert os.listdir(tmp_path) == []


def test_the_default_directory_is_dev_shm_and_holds_nothing_after_close():
    if not shm.available():
        pytest.skip("no writable /dev/shm")
    seg = Segment.create(64, 64)
    assert seg.path.parent == shm.SHM_DIR and seg.linked
    seg.close()
    assert not seg.path.exists()


def test_a_segment_cut_short_after_attach_is_refused_not_faulted(tmp_path):
    client = Segment.create(4000, 4000, tmp_path)
    shard = AttachedSegment.attach(client.name, client.token_hex, 4000, 4000, tmp_path)
    gen, n = client.put_request(torch.ones(1000))
    os.truncate(client.path, 4096 + 100)           # the client shrinks its file under the shard
    assert read(shard, gen, n) is None              # a short read, not SIGBUS
    assert not shard.put_reply(1, torch.ones(1000))
    os.truncate(client.path, 0)
    assert read(shard, gen, n) is None              # the generation itself is gone
    shard.close()
    client.close()


def test_a_directory_too_small_for_the_segment_refuses_it_at_creation(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(ShmError) as err:
        Segment.create(4000, 4000, tmp_path)
    assert err.value.code == "no_space" and os.listdir(tmp_path) == []
