"""Where a same-host round trip's time goes, at one size: psgd's wall time with
shared memory against the CPU time its shard and its client spend per round
trip, and the in-process shared-memory floor. On a loaded machine the wall time
minus both CPU times is waiting for a core.

    python benchmarks/comm/cpu_split.py 1     # MB
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

from psgd.bench.procs import BenchShards, process_cpu_s
from psgd.bench.raw_shm import ShmSgdFloor
from psgd.workers.client import PSClient

TRIPS, WARMUP = 300, 20


def timed(trip) -> list[float]:
    out = []
    for _ in range(TRIPS):
        t0 = time.perf_counter()
        trip()
        out.append(time.perf_counter() - t0)
    return out


def main(mb: float) -> str:
    torch.set_num_threads(1)
    numel = int(mb * (1 << 20)) // 4
    grads = [torch.randn(numel) * 1e-3]
    with BenchShards(numel, 1) as cluster:
        client = PSClient(cluster.addresses, cluster.layout, heartbeat_s=None, token=cluster.token,
                          shared_memory_min_bytes=0)
        try:
            client.register()
            for _ in range(WARMUP):
                client.push_pull(grads)
            shard0, client0 = process_cpu_s(cluster.pids[0]), time.process_time()
            wall = timed(lambda: client.push_pull(grads))
            shard_cpu = (process_cpu_s(cluster.pids[0]) - shard0) / TRIPS
            client_cpu = (time.process_time() - client0) / TRIPS
        finally:
            client.shutdown_servers()
            client.close()
    floor = ShmSgdFloor(numel)
    try:
        floor_times = timed(lambda: floor.round_trip(grads[0]))
    finally:
        floor.close()
    return (f"{mb:g} MB: psgd median {statistics.median(wall) * 1e3:.3f} ms (mean {statistics.mean(wall) * 1e3:.3f}); "
            f"CPU per round trip: shard {shard_cpu * 1e3:.3f} ms, client {client_cpu * 1e3:.3f} ms; "
            f"in-process floor median {statistics.median(floor_times) * 1e3:.3f} ms; "
            f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    print(main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0))
