"""`psgd bench overlap`: what workers.overlap buys, measured side by side.

A worker trains a stack of linear layers (m bytes in all) through psgd.Optimizer
against real shard processes on this host. Its compute is emulated: every layer
sleeps c / L during backward (the GPU's share of a step, which leaves the CPU to
the communication), so the compute time is exactly c wherever it runs. First the
communication time alone is measured (c = 0); then, with all variants
interleaved run by run, steps per second of overlap off, pipeline and backward,
against the serial bound 1 / (c + comm) and the ideal 1 / max(c, comm).
"""
from __future__ import annotations

import dataclasses
import secrets
import statistics
import threading
import time
from dataclasses import dataclass

import torch
from torch import nn

from psgd.bench.procs import START_TIMEOUT_S, bench_context
from psgd.config import load_config
from psgd.config.modes import Overlap
from psgd.core.sharding import layout_for_module

__all__ = ["OverlapPoint", "run_overlap_bench", "VARIANTS"]

VARIANTS = (Overlap.OFF, Overlap.PIPELINE, Overlap.BACKWARD)
LAYERS = 8


class _Compute(torch.autograd.Function):
    """Identity forward; sleeps during backward: one layer's share of the step's compute."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.seconds > 0:
            time.sleep(ctx.seconds)
        return grad, None


class _Layer(nn.Module):
    def __init__(self, width: int, compute_s: float):
        super().__init__()
        self.linear = nn.Linear(width, width, bias=False)
        self.compute_s = compute_s

    def forward(self, x):
        return _Compute.apply(self.linear(x), self.compute_s)


def _model(width: int, compute_s: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[_Layer(width, compute_s / LAYERS) for _ in range(LAYERS)])


def _config(addresses, overlap: Overlap, shards: int):
    servers = addresses if addresses is not None else shards
    cfg = load_config(None, ["cluster.workers=1", "consistency.mode=asp", "optimizer.lr=0.000001",
                             f"workers.overlap={overlap.value}", "workers.device=cpu", "checkpoint.enabled=false",
                             "cluster.timeout_s=600", "cluster.heartbeat_s=100"])
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=servers))


def _shard_child(width: int, shards: int, index: int, token: str, conn) -> None:
    torch.set_num_threads(1)
    from psgd.servers.shard import ShardServer
    model = _model(width, 0.0)
    layout = layout_for_module(model, shards)
    params = layout.flatten([p.detach() for p in model.parameters()])[index]
    server = ShardServer(_config(None, Overlap.OFF, shards), index, "127.0.0.1:0", params, layout.fingerprint,
                         run_token=token)
    conn.send(server.address.replace("tcp://", ""))
    conn.close()
    server.serve(threading.Event())


@dataclass(frozen=True)
class OverlapPoint:
    variant: str
    steps_per_s: list[float]      # one per run

    @property
    def median(self) -> float:
        return statistics.median(self.steps_per_s)


def _run(addresses, width: int, overlap: Overlap, compute_s: float, steps: int, shards: int):
    """(steps per second, median compute time of a step, median time in opt.step())."""
    model = _model(width, compute_s)
    x = torch.ones(1, width)
    from psgd.workers.optimizer import Optimizer
    computes, comms = [], []
    with Optimizer(model, _config(addresses, overlap, shards), rank=0) as opt:
        for k in range(steps + 3):  # three warm-up steps
            if k == 3:
                t0 = time.perf_counter()
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=False)  # as the built-in worker: gradient buffers are reused
            model(x).sum().backward()
            t2 = time.perf_counter()
            opt.step()
            computes.append(t2 - t1)
            comms.append(time.perf_counter() - t2)
        if overlap is Overlap.PIPELINE:
            opt.overlap.drain()  # the last push belongs to the timed steps
        rate = steps / (time.perf_counter() - t0)
    return rate, statistics.median(computes[3:]), statistics.median(comms[3:])


def run_overlap_bench(size_bytes: int, compute_ms: float | None = None, runs: int = 3, steps: int = 40,
                      shards: int = 2, on_line=lambda line: None) -> dict:
    """Returns {"size_bytes", "compute_s", "comm_s", "serial", "ideal", "points": {variant: OverlapPoint}}.
    compute_ms None: the measured communication time (compute = communication)."""
    width = max(8, int((size_bytes / 4 / LAYERS) ** 0.5))
    token = secrets.token_hex(16)
    ctx = bench_context()
    procs, pipes = [], []
    for i in range(shards):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_shard_child, args=(width, shards, i, token, child), daemon=True)
        p.start()
        child.close()
        procs.append(p)
        pipes.append(parent)
    try:
        addresses = []
        for i, pipe in enumerate(pipes):
            if not pipe.poll(START_TIMEOUT_S):
                raise RuntimeError(f"bench shard {i} did not start")
            addresses.append(pipe.recv())
        _, base_compute, base_comm = _run(addresses, width, Overlap.OFF, 0.0, steps, shards)
        target_s = base_comm if compute_ms is None else compute_ms / 1000.0
        sleep_s = max(0.0, target_s - base_compute)  # the model's own forward+backward counts as compute
        rates: dict[str, list[float]] = {v.value: [] for v in VARIANTS}
        computes, comms = [], []
        for run in range(runs):
            for v in VARIANTS:  # interleaved: every variant sees the same machine minute
                rate, compute, comm = _run(addresses, width, v, sleep_s, steps, shards)
                rates[v.value].append(rate)
                if v is Overlap.OFF:  # with nothing overlapped, the two phases are measured apart
                    computes.append(compute)
                    comms.append(comm)
            on_line(f"run {run + 1}/{runs}: " + ", ".join(f"{k} {r[-1]:.1f}/s" for k, r in rates.items()))
        compute_s, comm_s = statistics.median(computes), statistics.median(comms)
        on_line(f"model {4 * width * width * LAYERS / 2**20:.1f} MiB in {LAYERS} layers over {shards} shards; "
                f"measured: compute {1e3 * compute_s:.2f} ms a step, communication {1e3 * comm_s:.2f} ms")
        _shutdown(addresses, token)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    return {"size_bytes": 4 * width * width * LAYERS, "compute_s": compute_s, "comm_s": comm_s,
            "serial": 1.0 / (compute_s + comm_s), "ideal": 1.0 / max(compute_s, comm_s),
            "points": {k: OverlapPoint(k, r) for k, r in rates.items()}}


def _shutdown(addresses, token: str) -> None:
    from psgd.wire import protocol as P
    from psgd.wire.requests import RequestTracker
    from psgd.wire.transport import ShardConnections
    conns = ShardConnections(addresses)
    try:
        rpc = RequestTracker(conns, 5.0, 0)
        rpc.call({s: P.encode(P.Shutdown(req=rpc.next_id(), token=token)) for s in range(len(addresses))})
    except Exception:  # noqa: BLE001 - a shard that does not confirm is terminated by the caller
        pass
    finally:
        conns.close()


def overlap_table(result: dict) -> list[str]:
    serial, ideal = result["serial"], result["ideal"]
    lines = ["| overlap | steps/s, median of runs | / serial | / ideal |", "|---|---|---|---|"]
    for name, point in result["points"].items():
        lines.append(f"| {name} | {point.median:.1f} ({', '.join(f'{r:.1f}' for r in point.steps_per_s)}) | "
                     f"{point.median / serial:.2f} | {point.median / ideal:.2f} |")
    lines.append(f"| serial bound 1/(c+comm) | {serial:.1f} | 1.00 | {serial / ideal:.2f} |")
    lines.append(f"| ideal 1/max(c, comm) | {ideal:.1f} | {ideal / serial:.2f} | 1.00 |")
    return lines
