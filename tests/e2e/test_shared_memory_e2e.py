"""The same-host shared-memory data path against real shard processes: the
bytes it carries are exactly those of the TCP path, bad gradients are refused
with the state untouched, and no segment outlives a SIGKILL of either side.
The models here are small: every client that must use shared memory sets
shared_memory_min_bytes=0 (the default keeps connections to small shards on TCP)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import kill_tree, spawn, wait_for, write_config
from support.bench_children import shm_client_loop

from psgd.bench.procs import BenchShards, bench_context
from psgd.config import load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.ports import free_ports
from psgd.tasks import build_model, load_task
from psgd.wire import protocol as P
from psgd.wire.shm import segment as shm
from psgd.workers.client import PSClient, RemoteError

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not shm.available(), reason="no sealable memfd here")]


def segments_of(pids) -> list[str]:
    """The psgd segments any live one of `pids` holds (open or mapped), by inode."""
    held = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                held.update(line.split()[4] for line in f if "/memfd:psgd-segment" in line)
        except FileNotFoundError:  # that process is gone, and with it whatever it held
            pass
    return sorted(held)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("encoding", ["none", "bf16"])
def test_shared_memory_carries_exactly_the_bytes_of_tcp(encoding):
    numel = 40_000
    with BenchShards(numel, 1) as a, BenchShards(numel, 1) as b:
        over_shm = PSClient(a.addresses, a.layout, heartbeat_s=None, encoding=encoding, token=a.token,
                            shared_memory_min_bytes=0)
        over_tcp = PSClient(b.addresses, b.layout, heartbeat_s=None, encoding=encoding, shared_memory="off",
                            token=b.token)
        try:
            init_a, init_b = over_shm.register()[0].clone(), over_tcp.register()[0].clone()
            assert over_shm.shared_memory == [True] and over_tcp.shared_memory == [False]
            assert torch.equal(init_a, init_b)
            gen = torch.Generator().manual_seed(0)
            last = init_a
            for step in range(30):
                g = [torch.randn(numel, generator=gen) * (step + 1)]
                if step % 7 == 3:  # plain pushes and pulls take the same path
                    assert [ack.applied for ack in over_shm.push(g) + over_tcp.push(g)] == [True, True]
                    pa, pb = over_shm.pull(), over_tcp.pull()
                else:
                    pa, pb = over_shm.push_pull(g), over_tcp.push_pull(g)
                assert torch.equal(pa[0], pb[0]), f"step {step}: parameters differ"
                assert not torch.equal(pa[0], last)
                last = pa[0].clone()

            bad = torch.randn(numel, generator=gen)
            bad[12_345] = float("nan")
            acks = over_shm.push([bad])
            assert not acks[0].applied
            assert torch.equal(over_shm.pull()[0], last)  # untouched, byte for byte
            sa, sb = over_shm.stats()[0], over_tcp.stats()[0]
            assert sa["counters"]["rejected_nonfinite"] == 1
            assert sa["counters"]["shm_attached"] == 1 and "shm_attached" not in sb["counters"]
            assert sa["version"] == sb["version"] == 30
        finally:
            for c in (over_shm, over_tcp):
                c.shutdown_servers()
                c.close()
    pa = None  # the last reply's view was the last thing holding the mapping
    assert segments_of([os.getpid()]) == []


def _send_raw(client: PSClient, record: P.Record, frames=()) -> None:
    """One hand-made request through the client's own connection; raises RemoteError."""
    client._rpc.call({0: P.encode(record, frames)}, max_retries=0)


@pytest.mark.timeout(60)
def test_a_push_naming_a_wrong_or_missing_segment_is_refused_with_the_state_untouched():
    numel = 1000
    with BenchShards(numel, 1, workers=2) as cluster:
        good = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None, token=cluster.token,
                        shared_memory_min_bytes=0)
        plain = PSClient(cluster.addresses, cluster.layout, rank=1, heartbeat_s=None, shared_memory="off")
        try:
            before = good.register()[0].clone()
            plain.register()
            good.push_pull([torch.ones(numel)])
            before = good.pull()[0].clone()
            seg = good._shm.segment(0)
            gen, _ = seg.put_request(torch.full((numel,), 5.0))
            base = dict(rank=0, seq=good.seq, clock=good.clock, read_version=good.versions[0], numel=numel)
            cases = [
                (good, P.PushPull(req=good._rpc.next_id(), shm=gen + 1, **base), "bad_shm"),       # stale generation
                (good, P.PushPull(req=good._rpc.next_id(), shm=gen, encoding="topk", nnz=3, **base),
                 "bad_encoding"),                                                                   # sparse via shm
                (plain, P.PushPull(req=plain._rpc.next_id(), shm=1, **dict(base, rank=1, seq=plain.seq,
                                                                           clock=plain.clock)),
                 "bad_shm"),                                                                        # no segment
                (good, P.PushPull(req=good._rpc.next_id(), shm=gen, **base),
                 None),                                                                             # control: fine
            ]
            for client, record, code in cases[:3]:
                with pytest.raises(RemoteError) as err:
                    _send_raw(client, record)
                assert err.value.code == code
                assert torch.equal(good.pull()[0], before)
            stats = good.stats()[0]
            assert stats["version"] == 1 and stats["counters"]["bad_requests_bad_shm"] == 2
            _send_raw(*cases[3][:2])  # the same bytes named correctly are applied
            torch.testing.assert_close(good.pull()[0], before - 1e-6 * 5.0, rtol=0, atol=1e-10)
        finally:
            good.shutdown_servers()
            good.close()
            plain.close()


def start_client(address: str, rank: int, numel: int):
    """A client pushing forever in a process of its own (until killed), forked like a bench
    child; returns (process, the pipe on which it says whether it took shared memory)."""
    ctx = bench_context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=shm_client_loop, args=(address, rank, numel, child), daemon=True)
    proc.start()
    child.close()
    return proc, parent


def said(conn) -> tuple:
    assert conn.poll(60), "the client did not register"
    return conn.recv()


def sigkill(proc) -> None:
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join()


@pytest.mark.timeout(120)
def test_no_segment_outlives_a_sigkilled_client_and_a_restarted_one_uses_shared_memory(tmp_path):
    numel = 5000
    # Ranks differ: a rank stays bound to its first connection unless the run token is shown.
    with BenchShards(numel, 1, workers=3) as cluster:
        address = cluster.addresses[0]
        first, first_says = start_client(address, 0, numel)
        assert said(first_says) == ("shared_memory", True)
        (held,) = segments_of(cluster.pids)  # the shard maps first's segment
        assert segments_of([first.pid]) == [held]
        sigkill(first)
        # Killed while its offer was still unanswered (no shard at that address): no file anywhere,
        # so nothing is left once the process is gone.
        dead_end = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"
        stuck, _ = start_client(dead_end, 1, numel)
        assert wait_for(lambda: segments_of([stuck.pid]) != [], timeout=60)
        sigkill(stuck)
        if os.path.isdir("/dev/shm"):
            assert not [n for n in os.listdir("/dev/shm") if n.startswith("psgd-")]
        again, again_says = start_client(address, 1, numel)
        watcher = None
        try:
            assert said(again_says) == ("shared_memory", True)
            assert len(segments_of(cluster.pids)) == 2  # first's (until it times out) and again's
            watcher = PSClient(cluster.addresses, cluster.layout, rank=2, heartbeat_s=None, token=cluster.token,
                               shared_memory="off")
            watcher.register()
            v0 = watcher.stats()[0]["version"]
            assert wait_for(lambda: watcher.stats()[0]["version"] > v0 + 10, timeout=30)
        finally:
            sigkill(again)
            if watcher is not None:
                watcher.shutdown_servers()
                watcher.close()


def _start_shard(config: Path, run_dir: Path, n_ready: int):
    proc = spawn([sys.executable, "-m", "psgd.cli", "server", str(config), "--shard", "0", "--run-dir", str(run_dir)],
                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    events = run_dir / "events" / "server-0.jsonl"
    assert wait_for(lambda: (events.exists() and events.read_text().count('"ready"') > n_ready)
                    or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, "shard did not start"
    return proc


@pytest.mark.timeout(120)
def test_a_sigkilled_shard_restarts_and_the_client_moves_to_a_fresh_segment(tmp_path):
    lr = 0.125
    port = free_ports("127.0.0.1", 1)[0]
    config = write_config(tmp_path / "c.yaml", cluster={"servers": [f"127.0.0.1:{port}"], "workers": 1,
                                                        "timeout_s": 30.0},
                          optimizer={"name": "sgd", "lr": lr}, task={"model": "linear", "dataset": "synthetic"},
                          checkpoint={"every_updates": 3, "every_s": 0})
    cfg = load_config(config)
    model = build_model(cfg, load_task(cfg))
    layout = layout_for_module(model, 1)
    init = layout.flatten([p.detach() for p in model.parameters()])[0].double()
    n = layout.shard_sizes[0]
    run_dir = tmp_path / "run"
    shard = _start_shard(config, run_dir, 0)
    client = PSClient(cfg.cluster.servers, layout, rank=0, heartbeat_s=None, shared_memory_min_bytes=0,
                      request_timeout_s=0.5, max_retries=200)
    try:
        client.register()
        assert client.shared_memory == [True] and client.doorbells == [True]
        grads = [torch.full((n,), (k % 4 + 1) / 64.0) for k in range(20)]
        for g in grads[:10]:
            client.push_pull([g])
        os.kill(shard.pid, signal.SIGKILL)
        shard.wait()
        shard = _start_shard(config, run_dir, 1)
        for g in grads[10:]:
            out = client.push_pull([g])
        assert client.shared_memory == [True] and client.doorbells == [True]  # re-registered: new segment and bell
        expected = init.clone()
        for g in grads:
            expected -= lr * g.double()
        torch.testing.assert_close(out[0].double(), expected, rtol=0, atol=1e-6)
        stats = client.stats()[0]
        assert stats["version"] == 20  # none lost, none applied twice
        # The restarted shard heard the last pushes through the new bell (the first, resent, on ZeroMQ).
        assert stats["counters"]["bell_requests"] >= 9
        mine = segments_of([os.getpid()])
        assert len(mine) == 1 and segments_of([shard.pid]) == mine  # the old segment is gone from both
    finally:
        client.close()
        kill_tree(shard)
    out = None  # the last reply's view was the last thing holding the mapping
    assert segments_of([os.getpid()]) == []
