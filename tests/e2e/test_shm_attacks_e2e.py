"""The shared-memory data path against a hostile or unlucky same-host client,
with real shard processes (issue 24, items 1-4): a client trying to cut its
segment short under the shard's mapping (or offering one that could be cut),
a process that cannot reserve its segments, a gradient rewritten after its
request was sent, and segments of connections that are gone."""
from __future__ import annotations

import os
import tempfile

import pytest
import torch
from support.bench_children import forked_bench_shards, run_script

from psgd.bench.procs import BenchShards
from psgd.wire import protocol as P
from psgd.wire.shm import links as shm_links
from psgd.wire.shm import segment as shm
from psgd.workers.client import PSClient, RemoteError

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")]
LR = 1e-6  # BenchShards' SGD step; its parameters start at zero


@pytest.fixture(autouse=True, scope="module")
def forked_shards():
    """Shards and client scripts forked from one preloaded server (tests/support/bench_children.py)."""
    with forked_bench_shards():
        yield


def segments_held_by(pid: int) -> int:
    """How many psgd segments a process still holds, open or mapped (memfd inodes)."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:psgd-segment"):
                held.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
        except OSError:
            pass
    with open(f"/proc/{pid}/maps") as f:
        held.update(int(line.split()[4]) for line in f if "/memfd:psgd-segment" in line)
    return len(held)


@pytest.mark.timeout(60)
def test_a_client_cannot_shrink_its_segment_and_an_unsealed_one_is_refused(monkeypatch):
    numel = 50_000
    kept = []  # the hostile client keeps a descriptor of its own to the segment
    create = shm_links.Segment.create

    def create_and_keep(*args, **kwargs):
        seg = create(*args, **kwargs)
        kept.append(os.open(f"/proc/self/fd/{shm.parse_name(seg.name)[1]}", os.O_RDWR))
        return seg

    monkeypatch.setattr(shm_links.Segment, "create", create_and_keep)
    with BenchShards(numel, 1, workers=2) as cluster:
        hostile = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                           shared_memory_min_bytes=0, request_timeout_s=10, max_retries=0)
        honest = PSClient(cluster.addresses, cluster.layout, rank=1, heartbeat_s=None, shared_memory="off",
                          request_timeout_s=10, max_retries=0)
        try:
            hostile.register()
            honest.register()
            assert hostile.shared_memory == [True]
            hostile.push_pull([torch.ones(numel)])
            for size in (0, 4096 + 100):  # what used to fault a shard mapping the file
                with pytest.raises(PermissionError):
                    os.ftruncate(kept[0], size)
            torch.testing.assert_close(hostile.push_pull([torch.ones(numel)])[0], torch.full((numel,), -2 * LR),
                                       rtol=0, atol=1e-12)
            # An offer of a file without the seal (any ordinary file with the right header) is refused.
            with tempfile.TemporaryFile() as f:
                os.write(f.fileno(), os.pread(kept[0], shm.segment_bytes(4 * numel, 4 * numel), 0))
                seg = hostile._shm.segment(0)
                offer = P.Register(req=hostile._rpc.next_id(), rank=0, fingerprint=cluster.layout.fingerprint,
                                   token=cluster.token, shm=f"psgd-{os.getpid()}-{f.fileno()}",
                                   shm_token=seg.token_hex)
                welcome, _ = hostile._rpc.call({0: P.encode(offer)}, max_retries=0)[0]
            assert welcome.shm is False
            assert cluster.procs[0].is_alive()
            honest.push_pull([torch.ones(numel)])
            stats = honest.stats()[0]
            assert stats["version"] == 3 and stats["counters"]["shm_refused"] == 1
        finally:
            os.close(kept[0])
            honest.shutdown_servers(token=cluster.token)
            hostile.close()
            honest.close()


FLIPPER_CLIENT = """
import os, struct, sys, torch
from psgd.bench.procs import bench_layout
from psgd.workers.client import PSClient
address, numel, pushes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = PSClient([address], bench_layout(numel, 1), rank=0, heartbeat_s=None, shared_memory_min_bytes=0,
             request_timeout_s=60)
c.register()
seg = c._shm.segment(0)
mm, spot = seg._mm, 4096 + 4 * (numel // 2)  # the request region starts after a one-page header
nan, one = struct.pack("<f", float("nan")), struct.pack("<f", 1.0)
child = os.fork()
if child == 0:  # the hostile half: rewrites that element, NaN and back, as fast as it can
    while True:
        mm[spot:spot + 4] = nan
        mm[spot:spot + 4] = one
applied = sum(ack.applied for _ in range(pushes) for ack in c.push([torch.ones(numel)]))
os.kill(child, 9)
os.waitpid(child, 0)
print("applied", applied, flush=True)
"""


@pytest.mark.timeout(120)
def test_a_gradient_rewritten_after_its_request_was_sent_is_checked_and_applied_as_one_copy():
    numel, pushes = 20_000, 300
    with BenchShards(numel, 1) as cluster:
        watcher = PSClient(cluster.addresses, cluster.layout, role="evaluator", heartbeat_s=None,
                           shared_memory="off")
        try:
            code, out, err = run_script(FLIPPER_CLIENT, [cluster.addresses[0], str(numel), str(pushes)], timeout=100)
            assert code == 0, err[-2000:]
            applied = int(out.split()[-1])
            params = watcher.register()[0]
            stats = watcher.stats()[0]
            # Every push was either refused whole or applied whole as all ones: never half NaN.
            assert stats["counters"]["pushes"] == pushes
            assert applied + stats["counters"].get("rejected_nonfinite", 0) == pushes
            assert bool(torch.isfinite(params).all())
            torch.testing.assert_close(params, torch.full((numel,), -LR * applied), rtol=1e-5, atol=0)
        finally:
            watcher.shutdown_servers(token=cluster.token)
            watcher.close()


@pytest.mark.timeout(60)
def test_departed_connections_release_their_segments_and_evaluator_ranks_are_bounded():
    numel = 100_000
    with BenchShards(numel, 1, workers=2) as cluster:
        pid = cluster.pids[0]
        clients = [PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                            shared_memory_min_bytes=0),
                   PSClient(cluster.addresses, cluster.layout, rank=0, role="evaluator", heartbeat_s=None,
                            shared_memory_min_bytes=0)]
        stray = PSClient(cluster.addresses, cluster.layout, rank=99, role="evaluator", heartbeat_s=None,
                         shared_memory_min_bytes=0, max_retries=0)
        try:
            for c in clients:
                c.register()
                assert c.shared_memory == [True]
            clients[0].push_pull([torch.ones(numel)])
            clients[1].pull()
            assert segments_held_by(pid) == 2
            with pytest.raises(RemoteError) as err:
                stray.register()
            assert err.value.code == "bad_rank" and segments_held_by(pid) == 2
            assert clients[0].leave() and segments_held_by(pid) == 1
            assert clients[1].leave() and segments_held_by(pid) == 0
        finally:
            clients[1].shutdown_servers(token=cluster.token)
            for c in clients + [stray]:
                c.close()


SMALL_SHM_CLIENT = """
import resource, signal, sys, torch
from psgd.bench.procs import BenchShards
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit: EFBIG, not death
resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))  # memfd sizes count too
from psgd.workers.client import PSClient
numel = int(sys.argv[1])
with BenchShards(numel, 2) as cluster:
    c = PSClient(cluster.addresses, cluster.layout, heartbeat_s=None, shared_memory_min_bytes=0, token=cluster.token)
    c.register()
    for _ in range(5):
        out = c.push_pull([torch.ones(numel // 2)] * 2)
    assert all(torch.equal(p, torch.full((numel // 2,), -5e-6)) for p in out), out
    print("shared_memory", c.shared_memory, flush=True)
    c.shutdown_servers()
    c.close()
"""


@pytest.mark.timeout(120)
def test_a_process_that_cannot_reserve_its_segments_falls_back_to_tcp_with_one_warning():
    numel = 200_000  # two shards: two segments of 2 x 400 kB each, with files limited to 256 kB
    code, out, err = run_script(SMALL_SHM_CLIENT, [str(numel)], timeout=100)
    assert code == 0, err[-2000:]
    assert out.split("\n")[0] == "shared_memory [False, False]"
    warnings = [line for line in err.splitlines() if "shared memory off" in line]
    assert len(warnings) == 1 and "cannot reserve a segment" in warnings[0], err[-2000:]


@pytest.mark.timeout(60)
def test_garbage_through_a_doorbell_gets_an_error_and_broken_framing_only_costs_the_bell():
    import struct

    numel = 50_000
    with BenchShards(numel, 1, workers=1) as cluster:
        client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                          request_timeout_s=2, max_retries=3)
        try:
            client.register()
            assert client.shared_memory == [True] and client.doorbells == [True]
            client.push_pull([torch.ones(numel)])
            bell = client._shm.bells.get(0)
            # A header that is not msgpack: an ERROR reply comes back through the bell, nothing changes.
            assert bell.ring(b"\xc1 not msgpack")
            replies = []
            while not replies:
                replies = client._conns.recv(timeout_ms=5000)
            (shard, frames), = replies
            record, _ = P.decode(frames)
            assert isinstance(record, P.Error) and record.code == P.ErrorCode.BAD_HEADER
            stats = client.stats()[0]
            assert stats["version"] == 1 and stats["counters"]["bad_requests_bad_header"] == 1
            # A length no message can have: the shard drops the bell, the client sees it at once
            # and goes on over ZeroMQ, with every push applied once.
            os.write(bell.write_fd, struct.pack("<I", 1 << 30) + b"junk")
            out = client.push_pull([torch.ones(numel)])
            torch.testing.assert_close(out[0], torch.full((numel,), -2 * LR), rtol=0, atol=1e-12)
            assert client.doorbells == [False] and client.shared_memory == [True]
            stats = client.stats()[0]
            assert stats["version"] == 2 and stats["counters"]["bells_lost"] == 1
        finally:
            client.shutdown_servers(token=cluster.token)
            client.close()
