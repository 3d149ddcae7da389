"""Shared-memory segments: bytes in and out, the generation and reply-order
checks, payloads made in place, what attach refuses, and that a segment cannot
shrink under the shard (that it cannot outlive its process: tests/e2e/test_shm_segments_e2e.py)."""
from __future__ import annotations

import os
import tempfile

import pytest
import torch

from psgd.wire.shm import segment as shm
from psgd.wire.shm.attached import AttachedSegment
from psgd.wire.shm.segment import Segment, ShmError

pytestmark = pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")


def read(shard: AttachedSegment, gen: int, nbytes: int, dtype=torch.float32):
    """The request payload copied out, or None when refused."""
    if nbytes < 0 or nbytes % dtype.itemsize:
        return None
    out = torch.empty(nbytes // dtype.itemsize, dtype=dtype)
    return out if shard.read_request(gen, out) else None


@pytest.fixture
def pair():
    client = Segment.create(4 * 1000, 4 * 1000)
    shard = AttachedSegment.attach(client.name, client.token_hex, 4 * 1000, 4 * 1000)
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
    assert gen2 == gen + 2 and torch.equal(read(shard, gen2, nbytes, torch.float32), g2)
    assert torch.equal(seen, g)


def test_a_buffer_pushed_again_is_copied_again_with_what_it_holds_now(pair):
    client, shard = pair
    g = torch.randn(1000)  # a gradient buffer a worker reuses step after step
    gen, nbytes = client.put_request(g)
    g.copy_(torch.randn(1000))
    gen2, nbytes2 = client.put_request(g)
    assert (gen2, nbytes2) == (gen + 2, nbytes) and torch.equal(read(shard, gen2, nbytes, torch.float32), g)
    assert read(shard, gen, nbytes) is None  # the first descriptor is stale


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
    assert read(shard, gen + 2, 4 * 1000 + 4) is None
    assert read(shard, gen + 2, -4) is None
    assert read(shard, gen + 7, nbytes) is None
    with pytest.raises(ValueError, match="exceeds"):
        client.put_request(torch.zeros(1001))


def test_a_request_whose_region_is_being_rewritten_is_not_read(pair):
    client, shard = pair
    gen, nbytes = client.put_request(torch.ones(1000))
    view = client.request_tensor(torch.float32, 1000)  # the next gradient is about to be made in place
    assert read(shard, gen, nbytes) is None               # a late answer to the old request reads nothing
    view.fill_(2.0)
    gen2, _ = client.put_request(view)
    assert torch.equal(read(shard, gen2, nbytes), torch.full((1000,), 2.0))


def test_a_reply_for_an_older_request_never_overwrites_a_newer_one(pair):
    client, shard = pair
    newer = torch.full((1000,), 2.0)
    assert shard.put_reply(10, newer)
    assert not shard.put_reply(9, torch.zeros(1000))    # a late resend of an older request
    assert not shard.put_reply(10, torch.zeros(1000))   # the same request answered twice
    assert torch.equal(client.reply_view(10, 4000).view(torch.float32), newer)
    assert client.reply_view(9, 4000) is None            # stamped for request 10, not 9
    assert not shard.put_reply(11, torch.zeros(1001))   # larger than the region


def test_a_payload_made_in_the_request_region_is_sent_without_a_copy(pair):
    client, shard = pair
    g = client.request_tensor(torch.float32, 1000)
    assert g is client.request_tensor(torch.float32, 1000) and client.holds(g)
    g.copy_(torch.arange(1000, dtype=torch.float32))   # a gradient flattened straight into the segment
    gen, nbytes = client.put_request(g)
    assert nbytes == 4000 and torch.equal(read(shard, gen, nbytes), torch.arange(1000, dtype=torch.float32))
    h = client.request_tensor(torch.float16, 1000)      # an encoding's payload, made in place
    h.fill_(0.5)
    gen2, n2 = client.put_request(h)
    assert (gen2, n2) == (gen + 2, 2000) and torch.equal(read(shard, gen2, n2, torch.float16), h)
    # A copy of the region is not the region: it is copied in (and the region then holds it).
    assert not client.holds(g.clone()) and not client.holds(g[1:])
    with pytest.raises(ValueError, match="exceed"):
        client.request_tensor(torch.float32, 1001)


@pytest.mark.parametrize("name, token, sizes, code", [
    ("../../etc/passwd", None, (0, 0), "bad_name"),
    ("psgd-1-2-0123456789abcdef", None, (0, 0), "bad_name"),
    ("psgd-1-x", None, (0, 0), "bad_name"),
    ("psgd-999999999-3", None, (0, 0), "not_here"),
    (None, "00" * 16, (0, 0), "bad_token"),
    (None, "zz", (0, 0), "bad_token"),
    (None, None, (4001, 0), "too_small"),
    (None, None, (0, 4001), "too_small"),
])
def test_attach_refuses_what_is_not_this_clients_segment(name, token, sizes, code):
    client = Segment.create(4000, 4000)
    try:
        with pytest.raises(ShmError) as err:
            AttachedSegment.attach(name or client.name, token or client.token_hex, *sizes)
        assert err.value.code == code
    finally:
        client.close()


def test_attach_refuses_a_file_that_could_shrink_under_its_mapping(pair):
    client, _ = pair
    with tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as f:
        # The same bytes as the client's segment, in an ordinary (unsealable) file.
        os.write(f.fileno(), client._mm[:shm.segment_bytes(4000, 4000)])
        with pytest.raises(ShmError) as err:
            AttachedSegment.attach(f"psgd-{os.getpid()}-{f.fileno()}", client.token_hex, 4000, 4000)
        assert err.value.code == "not_sealed"


def test_the_segment_cannot_shrink_or_grow_and_the_shard_keeps_reading_it(pair):
    client, shard = pair
    gen, n = client.put_request(torch.ones(1000))
    fd = os.open(f"/proc/self/fd/{client.name.split('-')[2]}", os.O_RDWR)  # anyone of this user may try
    try:
        for size in (0, 4096 + 100, 1 << 30):
            with pytest.raises(PermissionError):
                os.ftruncate(fd, size)
    finally:
        os.close(fd)
    assert torch.equal(read(shard, gen, n), torch.ones(1000))
    assert shard.put_reply(1, torch.full((1000,), 2.0))


def test_the_mapping_outlives_the_name():
    client = Segment.create(400, 400)
    shard = AttachedSegment.attach(client.name, client.token_hex, 400, 400)
    name = client.name
    client.unlink()
    assert not client.linked
    with pytest.raises(ShmError) as err:
        AttachedSegment.attach(name, client.token_hex, 400, 400)  # the name leads nowhere now
    assert err.value.code in ("not_here", "bad_token")
    gen, n = client.put_request(torch.arange(100, dtype=torch.float32))
    assert torch.equal(read(shard, gen, n, torch.float32), torch.arange(100, dtype=torch.float32))
    shard.close()
    client.close()


def test_close_gives_up_the_name_only_on_the_creating_side():
    client = Segment.create(40, 40)
    shard = AttachedSegment.attach(client.name, client.token_hex, 40, 40)
    shard.close()
    assert client.linked
    client.close()
    assert not client.linked


def test_close_with_a_live_view_keeps_the_view_valid():
    client = Segment.create(40, 40)
    shard = AttachedSegment.attach(client.name, client.token_hex, 40, 40)
    shard.put_reply(1, torch.full((10,), 3.0))
    view = client.reply_view(1, 40).view(torch.float32)
    client.close()
    shard.close()
    assert torch.equal(view, torch.full((10,), 3.0))


def test_too_little_memory_for_the_segment_refuses_it_at_creation(monkeypatch):
    def full(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    opened = set(os.listdir("/proc/self/fd"))
    with pytest.raises(ShmError) as err:
        Segment.create(4000, 4000)
    assert err.value.code == "no_space"
    assert set(os.listdir("/proc/self/fd")) <= opened  # the memfd was closed


def test_two_reply_slots_hold_two_replies_and_a_slot_past_the_region_is_refused():
    n = 1000
    client = Segment.create(4 * n, shm.reply_slot_at(1, 4 * n) + 4 * n)
    shard = AttachedSegment.attach(client.name, client.token_hex, 4 * n, 4 * n)
    try:
        first, second = torch.randn(n), torch.randn(n)
        assert shard.put_reply(1, first, slot=0) and shard.put_reply(2, second, slot=1)
        assert client.reply_tensor(2, torch.float32, n, slot=0) is not None  # stamped 2: slot 0 still holds reply 1
        assert torch.equal(client.reply_tensor(2, torch.float32, n, slot=0), first)
        assert torch.equal(client.reply_tensor(2, torch.float32, n, slot=1), second)
        assert shm.reply_slot_at(1, 4 * n) % shm.PAGE == 0  # slots never share a page
        assert not shard.put_reply(3, second, slot=2) and not shard.put_reply(3, second, slot=-1)
        assert client.reply_tensor(2, torch.float32, n, slot=2) is None
    finally:
        shard.close()
        client.close()
    small = Segment.create(4 * n, 4 * n)  # one slot: a reply for slot 1 goes inline
    shard = AttachedSegment.attach(small.name, small.token_hex, 4 * n, 4 * n)
    try:
        assert not shard.put_reply(1, torch.ones(n), slot=1) and shard.last_reply_req == -1
    finally:
        shard.close()
        small.close()


def test_reused_views_follow_the_buffer_and_the_tensor_given(pair):
    """The shard reuses its views from message to message: one buffer read into again, the
    same parameters replied again (changed in place), then another buffer and another tensor."""
    client, shard = pair
    out, params = torch.empty(1000), torch.zeros(1000)
    for step in range(3):
        g = torch.full((1000,), float(step))
        gen, _ = client.put_request(g)
        assert shard.read_request(gen, out) and torch.equal(out, g)
        params.add_(1.0)  # an update in place: the same tensor, new values
        assert shard.put_reply(10 + step, params)
        assert torch.equal(client.reply_view(10 + step, 4000).view(torch.float32), params)
    other, copied = torch.empty(1000), params.clone() * 3  # copy-on-write: a new tensor to reply from
    gen, _ = client.put_request(torch.arange(1000.0))
    assert shard.read_request(gen, other) and torch.equal(other, torch.arange(1000.0))
    assert shard.put_reply(20, copied)
    assert torch.equal(client.reply_view(20, 4000).view(torch.float32), copied)
    half = torch.empty(500)  # a smaller read: its own span of the region
    gen, _ = client.put_request(torch.arange(500.0))
    assert shard.read_request(gen, half) and torch.equal(half, torch.arange(500.0))
