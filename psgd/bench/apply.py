"""`psgd bench apply`: how many gradient bytes per second one shard applies.

Times `ShardState.push` (the server's whole apply path: exactly-once and
clock bookkeeping, the non-finite check and the vectorised in-place update)
on a flat fp32 gradient, in this process, one thread, no sockets, so the
figure is the shard's compute ceiling rather than the network's.
"""
from __future__ import annotations

import os
import statistics
import time

import torch

from psgd.bench.procs import bench_config
from psgd.servers.state import PushStatus, ShardState

__all__ = ["apply_throughput", "run_apply_bench"]


def apply_throughput(size_bytes: int, optimizer: str, repeats: int = 30, warmup: int = 3) -> dict:
    """Median seconds per push of `size_bytes` of fp32 gradient, and GB/s (1e9 bytes)."""
    numel = size_bytes // 4
    state = ShardState(bench_config(1, optimizer), 0, torch.zeros(numel))
    state.register(0, 0.0)
    grad = torch.randn(numel) * 1e-3
    times = []
    for seq in range(warmup + repeats):
        t0 = time.perf_counter()
        result = state.push(0, seq, seq, state.version, grad)
        dt = time.perf_counter() - t0
        if result.status is not PushStatus.APPLIED:
            raise RuntimeError(f"bench push was not applied: {result.status}")
        if seq >= warmup:
            times.append(dt)
    median = statistics.median(times)
    return {"optimizer": optimizer, "size_bytes": size_bytes, "median_ms": round(median * 1e3, 4),
            "gb_per_s": round(size_bytes / median / 1e9, 3), "repeats": repeats}


def run_apply_bench(sizes: list[int], optimizers: list[str], repeats: int = 30) -> dict:
    torch.set_num_threads(1)
    return {"rows": [apply_throughput(size, opt, repeats) for opt in optimizers for size in sizes],
            "threads": torch.get_num_threads(), "load_avg_end": round(os.getloadavg()[0], 2)}
