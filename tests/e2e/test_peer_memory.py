"""A client that sends PULLs and never reads the replies cannot grow a shard
process's memory past a stated bound: its queue stops at the per-peer
high-water mark, it is cut off and counted, and the real worker is unaffected.

Stated bound: resident memory grows by at most (PEER_SEND_HWM + 4) copies of
the shard's parameters plus 64 MiB of allocator slack, here about 124 MiB for
a 6 MB shard (without the bound it grew by one copy per update: gigabytes)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import msgpack
import pytest
import torch
import zmq
from conftest import kill_tree, spawn

from psgd.core.sharding import make_layout
from psgd.wire import protocol as P
from psgd.wire.transport import PEER_SEND_HWM
from psgd.workers.client import PSClient

pytestmark = pytest.mark.e2e
NUMEL = 1_500_000  # 6 MB of float32
SHARD = textwrap.dedent("""
    import sys, threading, torch
    torch.set_num_threads(1)
    from psgd.config import load_config
    from psgd.core.sharding import make_layout
    from psgd.servers.shard import ShardServer
    numel = int(sys.argv[1])
    cfg = load_config(None, ["cluster.workers=1", "consistency.mode=asp", "optimizer.lr=0.000001",
                             "cluster.timeout_s=600", "cluster.heartbeat_s=100", "checkpoint.enabled=false"])
    server = ShardServer(cfg, 0, "127.0.0.1:0", torch.zeros(numel), make_layout([("w", (numel,))], 1).fingerprint)
    print(server.address.replace("tcp://", ""), flush=True)
    server.serve(threading.Event())
""")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(120)
def test_non_reading_client_is_cut_off_and_memory_stays_bounded():
    layout = make_layout([("w", (NUMEL,))], 1)
    proc = spawn([sys.executable, "-c", SHARD, str(NUMEL)], stdout=subprocess.PIPE, text=True)
    hostile = zmq.Context.instance().socket(zmq.DEALER)
    hostile.setsockopt(zmq.LINGER, 0)
    hostile.setsockopt(zmq.RCVBUF, 4096)  # and it never reads: only small buffers hold replies
    hostile.setsockopt(zmq.RCVHWM, 1)
    worker = None
    try:
        address = proc.stdout.readline().strip()
        worker = PSClient([address], layout, rank=0, request_timeout_s=10, heartbeat_s=None)
        worker.register()
        g = [torch.full((NUMEL,), 1e-3)]
        for _ in range(20):
            worker.push_pull(g)
        base = rss_bytes(proc.pid)
        hostile.connect(f"tcp://{address}")
        hostile.send_multipart([msgpack.packb([P.PROTOCOL_VERSION, int(P.MsgType.REGISTER), 1,
                                               {"role": "evaluator", "fingerprint": layout.fingerprint}])])
        for _ in range(200):
            for k in range(10):
                hostile.send_multipart([msgpack.packb([P.PROTOCOL_VERSION, int(P.MsgType.PULL), 2 + k, {}])])
            worker.push_pull(g)  # each update would otherwise leave one more copy behind the hostile's queue
        grown = rss_bytes(proc.pid) - base
        bound = (PEER_SEND_HWM + 4) * NUMEL * 4 + (64 << 20)
        assert grown <= bound, f"shard grew by {grown >> 20} MiB, bound {bound >> 20} MiB"
        counters = worker.stats()[0]["counters"]
        assert counters["peers_cut_off"] >= 1  # each time its queue filled up again
        assert counters["push_applied"] == 220  # the real worker was served throughout
    finally:
        hostile.close(0)
        if worker is not None:
            worker.close()
        kill_tree(proc)
