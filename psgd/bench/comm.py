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

import math
import os
import statistics
import time
from typing import Callable, Optional

import torch

from psgd.bench.procs import BenchShards, bench_context
from psgd.bench.rpc_ps import time_gloo_allreduce, time_torch_rpc_ps
from psgd.wire.protocol import tensor_frame
from psgd.bench.raw_zmq import RawEchoClient, serve_raw_echo
from psgd.workers.client import PSClient

__all__ = ["run_comm_bench", "comm_row", "RawSgdStep", "RAW_SGD_LR", "start_raw_server"]

RAW_SGD_LR = 1e-6  # the learning rate bench shards use too (bench_procs.bench_config)


class RawSgdStep:
    """The floor server's work per push: view the gradient frame, check it is
    finite (one pass), apply plain SGD in place, reply with the parameters."""

    def __init__(self, numel: int, lr: float = RAW_SGD_LR):
        self.params = torch.zeros(numel)
        self.lr = lr
        self._frame = tensor_frame(self.params)

    def __call__(self, payload: memoryview):
        grad = torch.frombuffer(payload, dtype=torch.float32)
        if math.isfinite(grad.sum().item()):
            self.params.add_(grad, alpha=-self.lr)
        return self._frame


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


def comm_row(size_bytes: int, shards: int, psgd: list[float], raw: list[float], gloo: list[float],
             rpc: list[float], raw_sgd: list[float]) -> dict:
    """One JSON row from per-iteration seconds: medians in ms and their ratios."""
    ms = {k: statistics.median(v) * 1e3 for k, v in
          (("psgd_ms", psgd), ("raw_zmq_ms", raw), ("gloo_ms", gloo), ("torch_rpc_ms", rpc),
           ("raw_zmq_sgd_ms", raw_sgd))}
    return {
        "size_bytes": size_bytes,
        "shards": shards,
        **{k: round(v, 4) for k, v in ms.items()},
        "psgd_over_raw_zmq": round(ms["psgd_ms"] / ms["raw_zmq_ms"], 4),
        "torch_rpc_over_psgd": round(ms["torch_rpc_ms"] / ms["psgd_ms"], 4),
        "gloo_over_psgd": round(ms["gloo_ms"] / ms["psgd_ms"], 4),
        "raw_zmq_sgd_over_raw_zmq": round(ms["raw_zmq_sgd_ms"] / ms["raw_zmq_ms"], 4),
        "psgd_over_raw_zmq_sgd": round(ms["psgd_ms"] / ms["raw_zmq_sgd_ms"], 4),
        "repeats": len(psgd),
    }


def _time_psgd_and_raw(size_bytes: int, shards: int, warmup: int, repeats: int) -> tuple[list, list, list]:
    """Seconds per round trip for psgd, the raw echo and the raw SGD floor, alternating."""
    numel = size_bytes // 4
    baselines = []
    try:
        baselines.append(start_raw_server(size_bytes))
        baselines.append(start_raw_server(size_bytes, sgd=True))
        (_, raw), (_, raw_sgd) = baselines
        with BenchShards(numel, shards) as cluster:
            client = PSClient(cluster.addresses, cluster.layout, rank=0, heartbeat_s=None)
            try:
                client.register()
                grads = [torch.randn(n) * 1e-3 for n in cluster.layout.shard_sizes]
                payload = memoryview(torch.cat(grads).numpy()).cast("B")
                times: tuple[list, list, list] = ([], [], [])
                for i in range(warmup + repeats):
                    t0 = time.perf_counter()
                    out = client.push_pull(grads)
                    t1 = time.perf_counter()
                    got = raw.round_trip(payload).nbytes
                    t2 = time.perf_counter()
                    got_sgd = raw_sgd.round_trip(payload).nbytes
                    t3 = time.perf_counter()
                    if sum(t.numel() for t in out) != numel or got != size_bytes or got_sgd != size_bytes:
                        raise RuntimeError("a round trip returned the wrong number of bytes")
                    if i >= warmup:
                        for series, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                            series.append(dt)
            finally:
                client.shutdown_servers(token=cluster.token)
                client.close()
    finally:
        for proc, conn in baselines:
            conn.stop_server()
            conn.close()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
    return times


def run_comm_bench(sizes: list[int], shards: list[int], repeats: int = 30, warmup: int = 3,
                   on_row: Optional[Callable[[dict], None]] = None) -> dict:
    """Blocks for the whole benchmark; returns {"rows": [...], ...}."""
    rows = []
    for size in sizes:
        numel = size // 4
        gloo = time_gloo_allreduce(numel, warmup, repeats)
        rpc = time_torch_rpc_ps(numel, warmup, repeats)
        for s in shards:
            psgd_t, raw_t, raw_sgd_t = _time_psgd_and_raw(size, s, warmup, repeats)
            row = comm_row(size, s, psgd_t, raw_t, gloo, rpc, raw_sgd_t)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return {"rows": rows, "repeats": repeats, "warmup": warmup, "torch": torch.__version__,
            "load_avg_end": round(os.getloadavg()[0], 2)}
