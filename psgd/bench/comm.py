"""`psgd bench comm`: psgd's push+pull round trip against raw ZeroMQ, gloo
all-reduce and a torch.distributed.rpc parameter server, measured in one run.

For each size, psgd (PSClient against real shard processes), the raw ZeroMQ
echo (a bare ROUTER process, zero-copy frames, same bytes each way) and the
raw ZeroMQ SGD floor (the same bare loop, but the server checks the gradient
is finite and applies `p -= lr * g` before replying with p: the least work
any parameter server must do per push) are timed alternately, one round trip
each per iteration, so machine noise hits all three alike; gloo and torch.rpc
are timed in their own process pairs. Every figure is a median; ratios are
computed from the medians of this run.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from typing import Callable, Optional

import torch

from psgd.bench.netns import netns_supported
from psgd.bench.netns_comm import run_netns_row
from psgd.bench.procs import BenchShards, bench_context
from psgd.bench.raw_shm import ShmFloorPeer, ShmSgdFloor
from psgd.bench.raw_zmq import RAW_SGD_LR, RawEchoClient, RawSgdStep, serve_raw_echo
from psgd.bench.ray_ps import ray_available, time_ray_actor_ps
from psgd.bench.rpc_ps import time_gloo_allreduce, time_torch_rpc_ps
from psgd.workers.client import PSClient

__all__ = ["run_comm_bench", "comm_row", "RawSgdStep", "RAW_SGD_LR", "start_raw_server"]

def _raw_echo_child(nbytes: int, conn) -> None:
    serve_raw_echo(nbytes, conn.send)


def _raw_sgd_child(nbytes: int, conn) -> None:
    torch.set_num_threads(1)
    serve_raw_echo(nbytes, conn.send, handle=RawSgdStep(nbytes // 4))


def start_raw_server(nbytes: int, sgd: bool = False):
    """A raw ZeroMQ baseline server process (the bare echo, or with `sgd` the
    SGD floor) for `nbytes` payloads; returns (process, RawEchoClient).
    Stop it with client.stop_server(), then join the process."""
    ctx = bench_context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_raw_sgd_child if sgd else _raw_echo_child, args=(nbytes, child), daemon=True)
    proc.start()
    child.close()
    return proc, RawEchoClient(parent.recv())


# Same-host peers timed with psgd (keys of `comm_row`'s `more`): psgd with shared memory
# off (the TCP path), psgd with shared memory at every size (wire.shared_memory_min_bytes: 0),
# the shared-memory floors (woken by a pipe, by ZeroMQ, in-process), and the Ray actor PS
# (when ray is installed).
MORE_PEERS = ("psgd_tcp", "psgd_shm", "psgd_recorded", "shm_floor", "shm_zmq_floor", "shm_floor_inproc", "ray")


def comm_row(size_bytes: int, shards: int, psgd: list[float], raw: list[float], gloo: list[float],
             rpc: list[float], raw_sgd: list[float], more: Optional[dict[str, list[float]]] = None) -> dict:
    """One JSON row from per-iteration seconds: medians in ms and their ratios.
    `more` adds MORE_PEERS columns (`X_ms`) and psgd's ratio to each (`psgd_over_X`)."""
    ms = {k: statistics.median(v) * 1e3 for k, v in
          (("psgd_ms", psgd), ("raw_zmq_ms", raw), ("gloo_ms", gloo), ("torch_rpc_ms", rpc),
           ("raw_zmq_sgd_ms", raw_sgd))}
    return {
        "size_bytes": size_bytes,
        "shards": shards,
        **{k: round(v, 4) for k, v in ms.items()},
        "psgd_over_raw_zmq": round(ms["psgd_ms"] / ms["raw_zmq_ms"], 4),
        "torch_rpc_over_psgd": round(ms["torch_rpc_ms"] / ms["psgd_ms"], 4),
        "psgd_over_torch_rpc": round(ms["psgd_ms"] / ms["torch_rpc_ms"], 4),
        "gloo_over_psgd": round(ms["gloo_ms"] / ms["psgd_ms"], 4),
        "raw_zmq_sgd_over_raw_zmq": round(ms["raw_zmq_sgd_ms"] / ms["raw_zmq_ms"], 4),
        "psgd_over_raw_zmq_sgd": round(ms["psgd_ms"] / ms["raw_zmq_sgd_ms"], 4),
        "repeats": len(psgd),
        **_more_columns(ms["psgd_ms"], ms["raw_zmq_sgd_ms"], more or {}),
    }


def _more_columns(psgd_ms: float, floor_ms: float, more: dict[str, list[float]]) -> dict:
    out = {}
    for name, times in more.items():
        if name not in MORE_PEERS:
            raise ValueError(f"unknown comm peer {name!r}")
        if not times:
            out[f"{name}_ms"] = out[f"psgd_over_{name}"] = None  # not measured (e.g. ray not installed)
            continue
        ms = statistics.median(times) * 1e3
        out[f"{name}_ms"] = round(ms, 4)
        out[f"psgd_over_{name}"] = round(psgd_ms / ms, 4)
    if out.get("psgd_tcp_ms"):
        out["psgd_tcp_over_raw_zmq_sgd"] = round(out["psgd_tcp_ms"] / floor_ms, 4)
        if out.get("psgd_shm_ms"):  # the two paths side by side: where shared memory wins
            out["psgd_shm_over_psgd_tcp"] = round(out["psgd_shm_ms"] / out["psgd_tcp_ms"], 4)
    return out


def _time_psgd_and_raw(size_bytes: int, shards: int, warmup: int, repeats: int) -> tuple[dict, bool]:
    """Seconds per round trip, alternating one of each per iteration: psgd as
    configured by default (on one host, shared memory from wire.shared_memory_min_bytes
    up), psgd with shared memory off (TCP), psgd with shared memory at any size, the
    raw echo, the raw ZeroMQ SGD floor and the three shared-memory floors, in an order
    shuffled afresh every iteration (seeded). Returns ({name: times}, whether the default
    psgd used shared memory)."""
    numel = size_bytes // 4
    baselines, floors, clients = [], [], []
    try:
        baselines.append(start_raw_server(size_bytes))
        baselines.append(start_raw_server(size_bytes, sgd=True))
        floors += [ShmFloorPeer(numel, RAW_SGD_LR), ShmFloorPeer(numel, RAW_SGD_LR, wake="zmq"),
                   ShmSgdFloor(numel, RAW_SGD_LR)]
        (_, raw), (_, raw_sgd) = baselines
        # The same shards recording for replay (run.record), side by side: what recording costs.
        with BenchShards(numel, shards, workers=3) as cluster, \
                BenchShards(numel, shards, workers=1, record=True) as recorded:
            for rank, path in ((0, "auto"), (1, "off")):
                clients.append(PSClient(cluster.addresses, cluster.layout, rank=rank, heartbeat_s=None,
                                        shared_memory=path, token=cluster.token))
            forced = PSClient(cluster.addresses, cluster.layout, rank=2, heartbeat_s=None, token=cluster.token,
                              shared_memory_min_bytes=0)
            clients.append(PSClient(recorded.addresses, recorded.layout, rank=0, heartbeat_s=None,
                                    token=recorded.token))
            clients.append(forced)
            try:
                for c in clients:
                    c.register()
                grads = [torch.randn(n) * 1e-3 for n in cluster.layout.shard_sizes]
                flat = torch.cat(grads)
                payload = memoryview(flat.numpy()).cast("B")
                trips = {
                    "psgd": lambda: sum(t.numel() * 4 for t in clients[0].push_pull(grads)),
                    "psgd_tcp": lambda: sum(t.numel() * 4 for t in clients[1].push_pull(grads)),
                    "psgd_shm": lambda: sum(t.numel() * 4 for t in forced.push_pull(grads)),
                    "psgd_recorded": lambda: sum(t.numel() * 4 for t in clients[2].push_pull(grads)),
                    "raw": lambda: raw.round_trip(payload).nbytes,
                    "raw_sgd": lambda: raw_sgd.round_trip(payload).nbytes,
                    "shm_floor": lambda: floors[0].round_trip(flat).numel() * 4,
                    "shm_zmq_floor": lambda: floors[1].round_trip(flat).numel() * 4,
                    "shm_floor_inproc": lambda: floors[2].round_trip(flat).numel() * 4,
                }
                times: dict[str, list] = {name: [] for name in trips}
                order, shuffle = list(trips), random.Random(size_bytes).shuffle
                for i in range(warmup + repeats):
                    # A fresh order every iteration: no method always comes first, or always
                    # right after the same other one (whose work cools caches and run queues).
                    shuffle(order)
                    for name in order:
                        trip = trips[name]
                        t0 = time.perf_counter()
                        got = trip()
                        dt = time.perf_counter() - t0
                        if got != size_bytes:
                            raise RuntimeError(f"{name} round trip returned {got} bytes, not {size_bytes}")
                        if i >= warmup:
                            times[name].append(dt)
                used_shm = all(clients[0].shared_memory)
            finally:
                clients[0].shutdown_servers(token=cluster.token)
                clients[2].shutdown_servers(token=recorded.token)
                for c in clients:
                    c.close()
    finally:
        for proc, conn in baselines:
            conn.stop_server()
            conn.close()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
        for floor in floors:
            floor.close()
    return times, used_shm


def run_comm_bench(sizes: list[int], shards: list[int], repeats: int = 30, warmup: int = 3,
                   on_row: Optional[Callable[[dict], None]] = None, cross_host: bool = True,
                   ray: bool = True) -> dict:
    """Blocks for the whole benchmark; returns {"rows": [...], "cross_host": [...], ...}.
    With `cross_host` (and root), each size is also measured between two network
    namespaces; otherwise "cross_host_skipped" says why not."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # this process is the client (and the in-process floor): one thread, like a worker
    try:
        return _run_comm_bench(sizes, shards, repeats, warmup, on_row, cross_host, ray)
    finally:
        torch.set_num_threads(threads)


def _run_comm_bench(sizes, shards, repeats, warmup, on_row, cross_host, with_ray) -> dict:
    rows, cross, skipped = [], [], None
    load = [os.getloadavg()[0]]
    ray_times, ray_state = {}, "not installed (pip install ray)" if with_ray else "not asked (--no-ray)"
    if with_ray and ray_available():
        try:
            ray_times, ray_state = time_ray_actor_ps([size // 4 for size in sizes], warmup, repeats), "measured"
        except RuntimeError as exc:  # Ray failing to start must not lose the rest of the run
            ray_state = f"failed: {exc}"
    for size in sizes:
        numel = size // 4
        gloo = time_gloo_allreduce(numel, warmup, repeats)
        rpc = time_torch_rpc_ps(numel, warmup, repeats)
        ray = ray_times.get(numel, [])
        for s in shards:
            times, used_shm = _time_psgd_and_raw(size, s, warmup, repeats)
            more = {k: times[k] for k in MORE_PEERS if k != "ray"}
            row = comm_row(size, s, times["psgd"], times["raw"], gloo, rpc, times["raw_sgd"], {**more, "ray": ray})
            row["shared_memory"] = used_shm
            rows.append(row)
            load.append(os.getloadavg()[0])
            if on_row is not None:
                on_row(row)
        if cross_host:
            skipped = netns_supported()
            if skipped is None:
                cross.append(cross_host_row(size, run_netns_row(size, warmup, repeats)))
                if on_row is not None:
                    on_row(cross[-1])
    return {"rows": rows, "cross_host": cross, "cross_host_skipped": skipped if cross_host else "not asked",
            "ray": ray_state,
            "repeats": repeats, "warmup": warmup, "torch": torch.__version__,
            "load_avg_end": round(os.getloadavg()[0], 2), "load_avg_max": round(max(load), 2)}


def cross_host_row(size_bytes: int, measured: dict) -> dict:
    """A cross-host row from `run_netns_row`'s per-iteration seconds."""
    psgd, floor = statistics.median(measured["psgd"]) * 1e3, statistics.median(measured["raw_sgd"]) * 1e3
    return {"where": "netns", "size_bytes": size_bytes, "shards": 1, "psgd_ms": round(psgd, 4),
            "raw_zmq_sgd_ms": round(floor, 4), "psgd_over_raw_zmq_sgd": round(psgd / floor, 4),
            "shared_memory": measured["shared_memory"], "repeats": len(measured["psgd"])}
