"""The shared-memory data path against a hostile or unlucky same-host client,
with real shard processes (issue 24, items 1-4): a segment cut short after the
shard attached, a /dev/shm too small for the segments, a gradient rewritten
after its request was sent, and segments of connections that are gone."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from conftest import spawn

from psgd.bench.procs import BenchShards
from psgd.wire import protocol as P
from psgd.wire import shm, shm_links
from psgd.workers.client import PSClient, RemoteError

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shm.available(), reason="no writable /dev/shm")]
LR = 1e-6  # BenchShards' SGD step; its parameters start at zero


def segments_held_by(pid: int) -> int:
    """How many psgd segment files a process still holds, open or mapped."""
    where = f"{shm.SHM_DIR}/{shm.PREFIX}"
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}").split()[0])
        except OSError:
            pass
    with open(f"/proc/{pid}/maps") as f:
        held.update(line.split()[5] for line in f if where in line)
    return sum(name.startswith(where) for name in held)


def kill_group(proc: subprocess.Popen) -> None:
    """The child's whole session, also when the child itself already died (of SIGBUS) and left its own children."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.timeout(60)
def test_a_client_that_truncates_its_segment_is_refused_and_the_shard_keeps_serving(monkeypatch):
    numel = 50_000
    kept = []  # the hostile client keeps its own descriptor of the segment file
    create = shm_links.Segment.create

    def create_and_keep(*args, **kwargs):
        seg = create(*args, **kwargs)
        kept.append(os.open(seg.path, os.O_RDWR))
        return seg

    monkeypatch.setattr(shm_links.Segment, "create", create_and_keep)
    with BenchShards(numel, 1, workers=2) as cluster:
        hostile = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                           request_timeout_s=10, max_retries=0)
        honest = PSClient(cluster.addresses, cluster.layout, rank=1, heartbeat_s=None, shared_memory="off",
                          request_timeout_s=10, max_retries=0)
        try:
            hostile.register()
            honest.register()
            assert hostile.shared_memory == [True]
            hostile.push_pull([torch.ones(numel)])
            gen = hostile._shm.segment(0).put_request(torch.ones(numel))[0]
            os.ftruncate(kept[0], 0)  # from here on the client's own mapping would fault: it only names it
            push = P.Push(req=hostile._rpc.next_id(), rank=0, seq=hostile.seq, clock=hostile.clock,
                          read_version=hostile.versions[0], numel=numel, shm=gen)
            with pytest.raises(RemoteError) as err:
                hostile._rpc.call({0: P.encode(push)}, max_retries=0)
            assert err.value.code == "bad_shm"
            # A reply cannot go into the cut file either: it comes on the socket.
            torch.testing.assert_close(hostile.pull()[0], torch.full((numel,), -LR), rtol=0, atol=1e-12)
            assert cluster.procs[0].is_alive()
            honest.push_pull([torch.ones(numel)])
            stats = honest.stats()[0]
            assert stats["version"] == 2 and stats["counters"]["bad_requests_bad_shm"] == 1
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
c = PSClient([address], bench_layout(numel, 1), rank=0, heartbeat_s=None, request_timeout_s=60)
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
        proc = spawn([sys.executable, "-c", FLIPPER_CLIENT, cluster.addresses[0], str(numel), str(pushes)],
                     stdout=subprocess.PIPE, text=True)
        watcher = PSClient(cluster.addresses, cluster.layout, role="evaluator", heartbeat_s=None,
                           shared_memory="off")
        try:
            out, _ = proc.communicate(timeout=100)
            assert proc.returncode == 0
            applied = int(out.split()[-1])
            params = watcher.register()[0]
            stats = watcher.stats()[0]
            # Every push was either refused whole or applied whole as all ones: never half NaN.
            assert stats["counters"]["pushes"] == pushes
            assert applied + stats["counters"].get("rejected_nonfinite", 0) == pushes
            assert bool(torch.isfinite(params).all())
            torch.testing.assert_close(params, torch.full((numel,), -LR * applied), rtol=1e-5, atol=0)
        finally:
            kill_group(proc)
            watcher.shutdown_servers(token=cluster.token)
            watcher.close()


@pytest.mark.timeout(60)
def test_departed_connections_release_their_segments_and_evaluator_ranks_are_bounded():
    numel = 100_000
    with BenchShards(numel, 1, workers=2) as cluster:
        pid = cluster.pids[0]
        clients = [PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token),
                   PSClient(cluster.addresses, cluster.layout, rank=0, role="evaluator", heartbeat_s=None)]
        stray = PSClient(cluster.addresses, cluster.layout, rank=99, role="evaluator", heartbeat_s=None,
                         max_retries=0)
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
import sys, torch
from psgd.bench.procs import BenchShards
from psgd.workers.client import PSClient
numel = int(sys.argv[1])
with BenchShards(numel, 2) as cluster:
    c = PSClient(cluster.addresses, cluster.layout, heartbeat_s=None, token=cluster.token)
    c.register()
    for _ in range(5):
        out = c.push_pull([torch.ones(numel // 2)] * 2)
    assert all(torch.equal(p, torch.full((numel // 2,), -5e-6)) for p in out), out
    print("shared_memory", c.shared_memory, flush=True)
    c.shutdown_servers()
    c.close()
"""


def _in_small_shm(size: str) -> list[str]:
    """A command prefix running in a private mount namespace whose /dev/shm is a tmpfs of `size`."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    script = f'mount -t tmpfs -o size={size},mode=1777 psgd-small-shm /dev/shm && exec "$@"'
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    probe = subprocess.run(prefix + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs over /dev/shm here: {probe.stderr.strip()}")
    return prefix


@pytest.mark.timeout(120)
def test_a_dev_shm_too_small_for_the_segments_falls_back_to_tcp_with_one_warning():
    numel = 200_000  # two shards: two segments of 2 x 400 kB each, in a 256 kB /dev/shm
    proc = spawn(_in_small_shm("256k") + [sys.executable, "-c", SMALL_SHM_CLIENT, str(numel)],
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=100)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err[-2000:]
    assert out.split("\n")[0] == "shared_memory [False, False]"
    warnings = [line for line in err.splitlines() if "shared memory off" in line]
    assert len(warnings) == 1 and "cannot hold a segment" in warnings[0], err[-2000:]
