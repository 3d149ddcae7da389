"""Benchmark children (psgd.bench.procs.bench_context): forked from a fork server that has
imported torch once, not spawned as fresh interpreters, and a child's last queued ZeroMQ
message still leaves although a forked child ends with os._exit."""
from __future__ import annotations

import pytest
import zmq
from support.bench_children import report_cpu, send_then_end

from psgd.bench.procs import bench_context

pytestmark = pytest.mark.e2e

# A fresh interpreter spends about 3 s of CPU importing torch; a forked child has it already.
FORKED_CHILD_CPU_MAX_S = 1.0


@pytest.mark.timeout(60)
def test_a_bench_child_starts_without_importing_torch_again():
    ctx = bench_context()
    for _ in range(2):  # the first starts the fork server; neither child pays for the imports
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=report_cpu, args=(child,), daemon=True)
        proc.start()
        child.close()
        assert parent.poll(50), "the child did not report"
        assert parent.recv() < FORKED_CHILD_CPU_MAX_S
        proc.join(10)
        assert proc.exitcode == 0


@pytest.mark.timeout(60)
def test_a_bench_childs_last_message_leaves_before_it_ends():
    nbytes = 64 << 20  # far more than one write: the child's I/O thread must outlive its last send
    ctx = bench_context()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=send_then_end, args=(nbytes, child), daemon=True)
    proc.start()
    child.close()
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        assert parent.poll(50), "the child did not bind"
        sock.connect(parent.recv())
        parent.send("go")
        assert sock.poll(30_000), "the child's last message never arrived"
        assert len(sock.recv(copy=False)) == nbytes
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        sock.close()
        if proc.is_alive():
            proc.kill()
