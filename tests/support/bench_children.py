"""Bodies of benchmark-context children that e2e tests start (psgd.bench.procs.bench_context):
module-level functions, so a child forked from multiprocessing's fork server imports them by name."""
from __future__ import annotations

import time

import torch
import zmq

from psgd.bench.procs import bench_layout
from psgd.wire.transport import zmq_context
from psgd.workers.client import PSClient


def report_cpu(conn) -> None:
    """Send the CPU seconds this child has used so far (its imports and start-up included)."""
    conn.send(time.process_time())


def send_then_end(nbytes: int, conn) -> None:
    """Bind a PUSH socket, report its address, send one `nbytes` message once the parent says
    so, close the socket with a linger, and end at once, as a shard does after its last reply."""
    sock = zmq_context().socket(zmq.PUSH)
    sock.bind("tcp://127.0.0.1:0")
    conn.send(sock.getsockopt(zmq.LAST_ENDPOINT).decode())
    conn.recv()
    sock.send(bytes(nbytes), copy=False)
    sock.close(linger=30_000)


def shm_client_loop(address: str, rank: int, numel: int, conn) -> None:
    """A worker's client pushing forever over shared memory (until killed): it reports
    whether its connection to `address` took shared memory once registered."""
    torch.set_num_threads(1)
    client = PSClient([address], bench_layout(numel, 1), rank=rank, heartbeat_s=None, shared_memory_min_bytes=0,
                      request_timeout_s=60)
    client.register()
    conn.send(("shared_memory", client.shared_memory[0]))
    grads = [torch.ones(numel)]
    while True:
        client.push_pull(grads)
