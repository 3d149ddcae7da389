"""`psgd bench scale`: many light workers against 1, 2 and 4 shards.

A light worker has no model: it sleeps a fixed simulated compute time, then
does one push+pull of a fixed-size gradient through a real PSClient, again
and again. Many logical workers share a process (one thread each; they
mostly sleep or wait on sockets), so hundreds fit on a small machine. For
each (shards, workers) point every worker runs for warmup + window seconds
from a common start; only round trips finishing inside the window count.
The CPU time of every shard and worker process over the window is read
from /proc, which is what shows where and why a shard saturates.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Callable, Optional, Sequence

import torch

from psgd.bench.procs import BenchShards, bench_context, bench_layout, process_cpu_s
from psgd.workers.client import PSClient

__all__ = ["run_scale_bench", "find_saturation", "path_speedups"]

READY_TIMEOUT_S = 120.0


def _light_worker(addresses, layout, rank, grads, compute_s, t0, t_end, window, out,
                  shared_memory="auto", token=None) -> None:
    # The run token: each point's new client takes over a rank an earlier point's client held.
    client = PSClient(addresses, layout, rank=rank, heartbeat_s=None, request_timeout_s=60,
                      shared_memory=shared_memory, token=token)
    done, lat = 0, []
    try:
        client.register()
        out["ready"].wait()
        delay = t0 - time.time()
        if delay > 0:
            time.sleep(delay)
        while time.time() < t_end:
            time.sleep(compute_s)
            start = time.perf_counter()
            client.push_pull(grads)
            finish = time.time()
            if window[0] <= finish < window[1]:
                done += 1
                lat.append(time.perf_counter() - start)
    finally:
        client.close()
    with out["lock"]:
        out["updates"] += done
        out["latencies"].extend(lat)


def _worker_proc(conn) -> None:
    """A long-lived process running a batch of light workers per task."""
    torch.set_num_threads(1)
    while True:
        task = conn.recv()
        if task is None:
            return
        addresses, numel, shards, ranks, compute_s = task["addresses"], task["numel"], task["shards"], \
            task["ranks"], task["compute_s"]
        layout = bench_layout(numel, shards)
        grads = [torch.randn(n) * 1e-3 for n in layout.shard_sizes]
        out = {"ready": threading.Event(), "lock": threading.Lock(), "updates": 0, "latencies": []}
        t0, t_end = task["t0"], task["t0"] + task["warmup_s"] + task["window_s"]
        window = (task["t0"] + task["warmup_s"], t_end)
        threads = [threading.Thread(target=_light_worker, args=(addresses, layout, r, grads,
                                                                compute_s, t0, t_end, window, out,
                                                                task.get("shared_memory", "auto"),
                                                                task.get("token")))
                   for r in ranks]
        for t in threads:
            t.start()
        out["ready"].set()
        for t in threads:
            t.join()
        conn.send({"updates": out["updates"], "latencies": out["latencies"]})


def _cpu(pids: list[int]) -> float:
    return sum(process_cpu_s(p) for p in pids)


def _run_point(pool, cluster: BenchShards, workers: int, numel: int, compute_s: float,
               warmup_s: float, window_s: float, shared_memory: str = "auto") -> dict:
    procs = [p for p, _ in pool]
    ranks = [list(range(i, workers, len(pool))) for i in range(len(pool))]
    t0 = time.time() + 1.0 + workers * 0.02  # time for every light worker to connect and register
    for (_proc, conn), rs in zip(pool, ranks):
        if rs:
            conn.send({"addresses": cluster.addresses, "numel": numel, "shards": cluster.shards, "ranks": rs,
                       "compute_s": compute_s, "t0": t0, "warmup_s": warmup_s, "window_s": window_s,
                       "shared_memory": shared_memory, "token": cluster.token})
    time.sleep(max(0.0, t0 + warmup_s - time.time()))
    cpu_shard0, cpu_work0, wall0 = _cpu(cluster.pids), _cpu([p.pid for p in procs]), time.time()
    time.sleep(max(0.0, t0 + warmup_s + window_s - time.time()))
    cpu_shard1, cpu_work1, wall1 = _cpu(cluster.pids), _cpu([p.pid for p in procs]), time.time()
    updates, lat = 0, []
    for (_proc, conn), rs in zip(pool, ranks):
        if rs:
            if not conn.poll(READY_TIMEOUT_S):
                raise RuntimeError("a light-worker process did not report")
            res = conn.recv()
            updates += res["updates"]
            lat += res["latencies"]
    lat.sort()
    wall = wall1 - wall0
    return {
        "shards": cluster.shards, "workers": workers, "shared_memory": shared_memory,
        "updates_per_s": round(updates / window_s, 2),
        "pull_latency_ms_median": round(statistics.median(lat) * 1e3, 3) if lat else None,
        "pull_latency_ms_p95": round(lat[int(0.95 * (len(lat) - 1))] * 1e3, 3) if lat else None,
        "ideal_updates_per_s": round(workers / compute_s, 2),
        # CPU cores busy over the window: per shard (mean) and all light workers together.
        "shard_cpu_cores": round((cpu_shard1 - cpu_shard0) / wall / cluster.shards, 3),
        "worker_cpu_cores": round((cpu_work1 - cpu_work0) / wall, 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def find_saturation(rows: list[dict], efficiency: float = 0.8) -> dict:
    """Per shard count (and data path, where rows measure several): the smallest
    worker count from which on every point's updates/s stay below `efficiency`
    x linear scaling from the smallest measured worker count (so one noisy dip
    that recovers does not count), and the peak updates/s. Keys are the shard
    count, or "S/path" when several paths were measured."""
    out = {}
    paths = sorted({r.get("shared_memory", "auto") for r in rows})
    for s in sorted({r["shards"] for r in rows}):
        for path in paths:
            pts = sorted((r for r in rows if r["shards"] == s and r.get("shared_memory", "auto") == path),
                         key=lambda r: r["workers"])
            if not pts:
                continue
            base = pts[0]["updates_per_s"] / pts[0]["workers"]
            below = [r["updates_per_s"] < efficiency * base * r["workers"] for r in pts]
            sat = next((r for i, r in enumerate(pts) if all(below[i:])), None)
            peak = max(pts, key=lambda r: r["updates_per_s"])
            key = s if len(paths) == 1 else f"{s}/{path}"
            out[key] = {"saturates_at_workers": sat["workers"] if sat else None, "point": sat,
                        "peak_updates_per_s": peak["updates_per_s"], "peak_workers": peak["workers"],
                        "max_workers": pts[-1]["workers"]}
    return out


def path_speedups(rows: list[dict]) -> list[dict]:
    """Where both paths were measured at a point: updates/s with shared memory
    ("auto") over TCP ("off"), each the median of its repeats at that point."""
    out = []
    points = sorted({(r["shards"], r["workers"]) for r in rows})
    for s, w in points:
        got = {p: [r["updates_per_s"] for r in rows if (r["shards"], r["workers"]) == (s, w)
                   and r.get("shared_memory") == p] for p in ("auto", "off")}
        if got["auto"] and got["off"]:
            auto, off = statistics.median(got["auto"]), statistics.median(got["off"])
            out.append({"shards": s, "workers": w, "auto_updates_per_s": auto, "off_updates_per_s": off,
                        "auto_over_off": round(auto / off, 3) if off else None, "repeats": len(got["auto"])})
    return out


def run_scale_bench(shards: list[int], workers: list[int], grad_bytes: int = 64 << 10,
                    compute_ms: float = 20.0, warmup_s: float = 1.0, window_s: float = 3.0,
                    processes: int = 4, on_row: Optional[Callable[[dict], None]] = None,
                    paths: Sequence[str] = ("auto",), record: bool = False) -> dict:
    """Blocks for the whole benchmark; returns {"rows": [...], "saturation": {...}, ...}.
    `record`: the shards record for replay as a run's shards do (run.record)."""
    numel = grad_bytes // 4
    ctx = bench_context()
    pool = []
    for _ in range(processes):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_proc, args=(child,), daemon=True)
        p.start()
        pool.append((p, parent))
    rows = []
    try:
        for s in shards:
            with BenchShards(numel, s, workers=max(workers), record=record) as cluster:
                try:
                    for w in workers:
                        for path in paths:  # several paths: measured back to back at each point
                            row = _run_point(pool, cluster, w, numel, compute_ms / 1e3, warmup_s, window_s, path)
                            rows.append(row)
                            if on_row is not None:
                                on_row(row)
                finally:
                    admin = PSClient(cluster.addresses, cluster.layout, role="evaluator", heartbeat_s=None,
                                     token=cluster.token)
                    admin.register()
                    admin.shutdown_servers(token=cluster.token)
                    admin.close()
    finally:
        for p, conn in pool:
            conn.send(None)
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    sat = find_saturation(rows)
    return {"rows": rows, "saturation": {str(k): v for k, v in sat.items()}, "path_speedups": path_speedups(rows),
            "grad_bytes": grad_bytes, "compute_ms": compute_ms, "window_s": window_s,
            "processes": processes, "record": record, "cores": os.cpu_count(), "load_avg_end": round(os.getloadavg()[0], 2)}
