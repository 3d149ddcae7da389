"""`psgd bench overlap`: what workers.overlap buys, measured side by side.

A worker trains a stack of layers (m bytes of weights in all) through psgd.Optimizer
against real shard processes on this host. Its compute is emulated: every layer
sleeps during backward and gives its weight a constant gradient (the GPU's share
of a step, which leaves the CPU to the communication); the sleep is calibrated so that the compute alone takes as long
as the communication alone (or --compute-ms).

Five things are timed, all from one process in the same minutes: compute alone
(forward and backward, no step), communication alone (step() with overlap off
and no backward), and full steps with overlap off, pipeline and backward. Each
has its own open Optimizer (a worker rank of its own, under ASP), so they are
interleaved in short blocks in a rotating order, and every run's bounds come
from that run's own compute and communication rates: serial 1 / (c + comm),
ideal 1 / max(c, comm). A block's time runs from the end of an untimed first
step to the end of its last step, so each variant is timed in its steady state
(a pipelined push still in flight at the end is collected untimed, as the
first block step's own push was timed). Rates are steps / wall time, never
medians of step times: a tail under load then counts as it does in training.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import statistics
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import nn

from psgd.bench.procs import START_TIMEOUT_S, bench_context
from psgd.config import load_config
from psgd.config.modes import Overlap
from psgd.core.sharding import layout_for_module
from psgd.runtime.devices import wait_for_device
from psgd.workers.overlap import Pipeline

__all__ = ["OverlapPoint", "run_overlap_bench", "VARIANTS", "overlap_table"]

VARIANTS = (Overlap.OFF, Overlap.PIPELINE, Overlap.BACKWARD)
COMPUTE, COMM = "compute", "comm"  # the two phases alone, timed between the variants
LAYERS = 8
CALIBRATIONS = 3  # rounds that fit the sleep to the communication time before the timed runs


class _Compute(torch.autograd.Function):
    """Identity forward; in backward, sleeps (one layer's share of the step's compute) and
    hands its layer's weight a constant gradient in a fresh tensor, as a backward kernel
    writes its output: the CPU does next to nothing, as when a GPU computes, and what it
    does (writing the gradient, accumulating it into .grad) is what a real step also does."""

    @staticmethod
    def forward(ctx, x, weight, layer):
        ctx.layer = layer
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.layer.compute_s > 0:
            time.sleep(ctx.layer.compute_s)
        return grad, ctx.layer.grad_value.clone(), None


class _Layer(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width)
        self.register_buffer("grad_value", torch.full((width, width), 1e-3), persistent=False)  # moves with .to()
        self.compute_s = 0.0

    def forward(self, x):
        return _Compute.apply(x, self.weight, self)


def _model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[_Layer(width) for _ in range(LAYERS)])


def _set_sleep(model: nn.Module, total_s: float) -> None:
    for layer in model:
        layer.compute_s = total_s / LAYERS


def _config(addresses, overlap: Overlap, shards: int, device: str = "cpu"):
    servers = addresses if addresses is not None else shards
    cfg = load_config(None, [f"cluster.workers={len(VARIANTS)}", "consistency.mode=asp", "optimizer.lr=0.000001",
                             f"workers.overlap={overlap.value}", f"workers.device={device}", "checkpoint.enabled=false",
                             "cluster.timeout_s=600", "cluster.heartbeat_s=100"])
    return dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=servers))


def _shard_child(width: int, shards: int, index: int, token: str, conn) -> None:
    torch.set_num_threads(1)
    from psgd.servers.shard import ShardServer
    model = _model(width)
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
    of_ideal: list[float]         # per run: steps_per_s / that run's ideal
    of_serial: list[float]        # per run: steps_per_s / that run's serial bound

    @property
    def median(self) -> float:
        return statistics.median(self.steps_per_s)


class _Worker:
    """One open Optimizer and its model: a variant, or (off's) the phases alone."""

    def __init__(self, opt, model, width: int, device: torch.device):
        self.opt, self.model, self.x, self.device = opt, model, torch.ones(1, width, device=device), device

    def _one(self, what: str) -> float:
        """One step; returns the seconds it spent in opt.step()."""
        if what != COMM:
            self.opt.zero_grad(set_to_none=False)  # as the built-in worker: gradient buffers are reused
            self.model(self.x).sum().backward()
        if what == COMPUTE:
            wait_for_device(self.device)
            return 0.0
        t0 = time.perf_counter()
        self.opt.step()
        wait_for_device(self.device)  # a step is over when the parameters are on the device
        return time.perf_counter() - t0

    def block(self, what: str, steps: int) -> tuple[float, float]:
        """Seconds for `steps` steps after an untimed first one, and of those, seconds in step()."""
        self._one(what)
        in_step = 0.0
        t0 = time.perf_counter()
        for _ in range(steps):
            in_step += self._one(what)
        seconds = time.perf_counter() - t0
        if isinstance(self.opt.overlap, Pipeline):
            self.opt.overlap.drain()  # untimed: the next block's other variants must not carry it
        return seconds, in_step


def _round(workers: dict, order: list[str], steps: int, start: int) -> dict[str, tuple[float, float]]:
    """(seconds, seconds in step()) of one block of each of `order`, starting the rotation at `start`."""
    k = start % len(order)
    return {what: workers[what].block(what, steps) for what in order[k:] + order[:k]}


def run_overlap_bench(size_bytes: int, compute_ms: float | None = None, runs: int = 3, steps: int = 10,
                      rounds: int = 4, shards: int = 1, on_line=lambda line: None, device: str = "cpu") -> dict:
    """Returns {"size_bytes", "compute_s", "comm_s", "serial", "ideal" (medians over runs),
    "runs": [per run: compute_s, comm_s, serial, ideal, rates], "points": {variant: OverlapPoint}}.
    compute_ms None: the compute is fitted to the measured communication time. `device`: where
    the worker's model lives (on cuda its gradients and parameters cross pinned buffers)."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    width = max(8, int((size_bytes / 4 / LAYERS) ** 0.5))
    load = [os.getloadavg()[0]]  # 1-minute load average before and after: the machine may be shared
    token = secrets.token_hex(16)
    ctx = bench_context()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every psgd process
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
        with ExitStack() as stack:
            from psgd.workers.optimizer import Optimizer
            workers: dict[str, _Worker] = {}
            for rank, v in enumerate(VARIANTS):
                model = _model(width).to(dev)
                opt = stack.enter_context(Optimizer(model, _config(addresses, v, shards, device), rank=rank))
                workers[v.value] = _Worker(opt, model, width, dev)
            workers[COMPUTE] = workers[COMM] = workers[Overlap.OFF.value]  # no hooks: the phases alone
            sleep_s = _calibrate(workers, compute_ms, steps, on_line)
            order = [COMPUTE, COMM] + [v.value for v in VARIANTS]
            per_run = []
            for run in range(runs):
                seconds, in_step = dict.fromkeys(order, 0.0), dict.fromkeys(order, 0.0)
                for r in range(rounds):
                    timed = _round(workers, order, steps, start=run * rounds + r)
                    took = {what: t for what, (t, _) in timed.items()}
                    for what, (t, t_step) in timed.items():
                        seconds[what] += t
                        in_step[what] += t_step
                    # The emulated compute runs late by however loaded the machine is: keep it at the
                    # communication time (each round's five blocks share one setting).
                    target = took[COMM] if compute_ms is None else steps * compute_ms / 1e3
                    sleep_s = max(0.0, sleep_s + 0.5 * (target - took[COMPUTE]) / steps)
                    _set_all(workers, sleep_s)
                rates = {what: rounds * steps / t for what, t in seconds.items()}
                c, comm = 1.0 / rates.pop(COMPUTE), 1.0 / rates.pop(COMM)
                # Where a variant's step time went: forward and backward (the emulated compute,
                # slowed when communication competes for the CPU), and step() (waiting).
                split = {v: (1.0 / rates[v] - in_step[v] / (rounds * steps), in_step[v] / (rounds * steps))
                         for v in rates}
                per_run.append({"compute_s": c, "comm_s": comm, "serial": 1.0 / (c + comm),
                                "ideal": 1.0 / max(c, comm), "rates": rates, "split_s": split})
                on_line(f"run {run + 1}/{runs}: compute {1e3 * c:.2f} ms, communication {1e3 * comm:.2f} ms; "
                        + ", ".join(f"{k} {r:.1f}/s" for k, r in rates.items()))
        on_line(f"model {4 * width * width * LAYERS / 2**20:.1f} MiB in {LAYERS} layers over {shards} shard(s); "
                f"emulated compute: {1e3 * sleep_s:.2f} ms of sleep a step at the end")
        _shutdown(addresses, token)
        load.append(os.getloadavg()[0])
    finally:
        torch.set_num_threads(threads)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    points = {v.value: OverlapPoint(v.value, [r["rates"][v.value] for r in per_run],
                                    [r["rates"][v.value] / r["ideal"] for r in per_run],
                                    [r["rates"][v.value] / r["serial"] for r in per_run]) for v in VARIANTS}
    med = {k: statistics.median(r[k] for r in per_run) for k in ("compute_s", "comm_s", "serial", "ideal")}
    return {"size_bytes": 4 * width * width * LAYERS, "device": device, "sleep_s": sleep_s, "load": load, **med, "runs": per_run, "points": points}


def _calibrate(workers: dict, compute_ms: float | None, steps: int, on_line) -> float:
    """The sleep a step that makes compute alone last as long as communication alone
    (or compute_ms): the emulated compute runs late under load, so it is measured."""
    sleep_s = 0.0
    for _ in range(CALIBRATIONS):
        _set_all(workers, sleep_s)
        took = {what: t for what, (t, _) in _round(workers, [COMPUTE, COMM], steps, 0).items()}
        target = took[COMM] / steps if compute_ms is None else compute_ms / 1e3
        sleep_s = max(0.0, sleep_s + target - took[COMPUTE] / steps)
        on_line(f"calibrating: compute {1e3 * took[COMPUTE] / steps:.2f} ms against {1e3 * target:.2f} ms; "
                f"sleep now {1e3 * sleep_s:.2f} ms")
    _set_all(workers, sleep_s)
    return sleep_s


def _set_all(workers: dict, sleep_s: float) -> None:
    for w in {id(w): w for w in workers.values()}.values():
        _set_sleep(w.model, sleep_s)


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
    """Medians over runs; a ratio is the median of the per-run ratios (each run against its own bounds)."""
    serial, ideal = result["serial"], result["ideal"]
    lines = ["| overlap | steps/s, median (runs) | / serial | / ideal |", "|---|---|---|---|"]
    for name, point in result["points"].items():
        lines.append(f"| {name} | {point.median:.1f} ({', '.join(f'{r:.1f}' for r in point.steps_per_s)}) | "
                     f"{statistics.median(point.of_serial):.2f} | {statistics.median(point.of_ideal):.2f} |")
    lines.append(f"| serial bound 1/(c+comm) | {serial:.1f} | 1.00 | {serial / ideal:.2f} |")
    lines.append(f"| ideal 1/max(c, comm) | {ideal:.1f} | {ideal / serial:.2f} | 1.00 |")
    c = [r["compute_s"] for r in result["runs"]]
    m = [r["comm_s"] for r in result["runs"]]
    lines.append("")
    lines.append("Where a step's time went, ms (median over runs): forward+backward / in step(): "
                 + "; ".join(f"{v} {1e3 * statistics.median(r['split_s'][v][0] for r in result['runs']):.2f} / "
                             f"{1e3 * statistics.median(r['split_s'][v][1] for r in result['runs']):.2f}"
                             for v in result["points"]) + ".")
    lines.append("")
    lines.append("Per run: compute c " + ", ".join(f"{1e3 * x:.2f}" for x in c) + " ms; communication "
                 + ", ".join(f"{1e3 * x:.2f}" for x in m) + " ms; c / comm "
                 + ", ".join(f"{a / b:.2f}" for a, b in zip(c, m)) + ". 1-minute load average "
                 + " before, after: " + ", ".join(f"{x:.1f}" for x in result["load"]) + " (on "
                 + f"{os.cpu_count()} cores).")
    return lines
