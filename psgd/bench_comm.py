"""`psgd bench comm`: psgd's push+pull round trip against raw ZeroMQ, gloo
all-reduce and a torch.distributed.rpc parameter server, measured in one run.

For each size, psgd (PSClient against real shard processes) and the raw
ZeroMQ echo (a bare ROUTER process, zero-copy frames, same bytes each way)
are timed alternately, one round trip each per iteration, so machine noise
hits both alike; gloo and torch.rpc are timed in their own process pairs.
Every figure is a median; ratios are computed from the medians of this run.
"""
from __future__ import annotations

import importlib
import os
import statistics
import time
from typing import Callable, Optional

import torch

from psgd.bench_procs import BenchShards, bench_context
from psgd.bench_rpc_ps import time_gloo_allreduce, time_torch_rpc_ps
from psgd.transport import RawEchoClient, serve_raw_echo

__all__ = ["run_comm_bench", "comm_row"]


def _raw_echo_child(nbytes: int, conn) -> None:
    serve_raw_echo(nbytes, conn.send)


def comm_row(size_bytes: int, shards: int, psgd: list[float], raw: list[float], gloo: list[float],
             rpc: list[float]) -> dict:
    """One JSON row from per-iteration seconds: medians in ms and their ratios."""
    ms = {k: statistics.median(v) * 1e3 for k, v in
          (("psgd_ms", psgd), ("raw_zmq_ms", raw), ("gloo_ms", gloo), ("torch_rpc_ms", rpc))}
    return {
        "size_bytes": size_bytes,
        "shards": shards,
        **{k: round(v, 4) for k, v in ms.items()},
        "psgd_over_raw_zmq": round(ms["psgd_ms"] / ms["raw_zmq_ms"], 4),
        "torch_rpc_over_psgd": round(ms["torch_rpc_ms"] / ms["psgd_ms"], 4),
        "gloo_over_psgd": round(ms["gloo_ms"] / ms["psgd_ms"], 4),
        "repeats": len(psgd),
    }


def _time_psgd_and_raw(size_bytes: int, shards: int, warmup: int, repeats: int) -> tuple[list, list]:
    client_mod = importlib.import_module("workers.client")
    numel = size_bytes // 4
    ctx = bench_context()
    parent, child = ctx.Pipe(duplex=False)
    echo = ctx.Process(target=_raw_echo_child, args=(size_bytes, child), daemon=True)
    echo.start()
    child.close()
    with BenchShards(numel, shards) as cluster:
        client = client_mod.PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
        raw = RawEchoClient(parent.recv())
        try:
            client.register()
            grads = [torch.randn(n) * 1e-3 for n in cluster.layout.shard_sizes]
            payload = memoryview(torch.randn(numel).numpy()).cast("B")
            psgd_t, raw_t = [], []
            for i in range(warmup + repeats):
                t0 = time.perf_counter()
                out = client.push_pull(grads)
                t1 = time.perf_counter()
                got = raw.round_trip(payload)
                t2 = time.perf_counter()
                if sum(t.numel() for t in out) != numel or got != size_bytes:
                    raise RuntimeError("a round trip returned the wrong number of bytes")
                if i >= warmup:
                    psgd_t.append(t1 - t0)
                    raw_t.append(t2 - t1)
        finally:
            raw.stop_server()
            raw.close()
            client.shutdown_servers()
            client.close()
            echo.join(timeout=10)
    return psgd_t, raw_t


def run_comm_bench(sizes: list[int], shards: list[int], repeats: int = 30, warmup: int = 3,
                   on_row: Optional[Callable[[dict], None]] = None) -> dict:
    """Blocks for the whole benchmark; returns {"rows": [...], ...}."""
    rows = []
    for size in sizes:
        numel = size // 4
        gloo = time_gloo_allreduce(numel, warmup, repeats)
        rpc = time_torch_rpc_ps(numel, warmup, repeats)
        for s in shards:
            psgd_t, raw_t = _time_psgd_and_raw(size, s, warmup, repeats)
            row = comm_row(size, s, psgd_t, raw_t, gloo, rpc)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return {"rows": rows, "repeats": repeats, "warmup": warmup, "torch": torch.__version__,
            "load_avg_end": round(os.getloadavg()[0], 2)}
