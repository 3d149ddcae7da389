"""`psgd sim profile`'s request probe: a real PSClient against a real shard process, each end's CPU per request.

The framing probe (profile._message) and the service probe (profile._apply)
time a request's parts inside one process. A real request costs its two
processes more: each is woken when a message reaches it (the poll, the
scheduler and the socket in the kernel: system time), ZeroMQ's I/O thread
moves its frames, and each end's Python runs around it (the client's request
tracking, shared-memory segment and doorbell; the shard's loop). This probe
runs clients in this process against one shard (psgd.servers.shard) in a
spawned process on loopback, push+pull after push+pull with plain SGD and
fp32, the client copying its gradient into the request as a worker's flatten
does and the reply into a model as a worker's load does, in two regimes:
alone (one client, each request waiting for its reply, so each finds the
other end asleep, as a lone step's request does) and queued (QUEUED clients
send together, so the shard takes the next request without sleeping, as a
busy shard does). Each end's CPU (user + system, every thread) per request,
at two sizes, less what the parts measured in one process charge the same
request, is kept as fixed + per byte (Linear.fit); the shard's extra cost
of being woken apart, and the client's share spent before its request leaves.
"""
from __future__ import annotations

import multiprocessing as mp
import resource
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

from psgd.sim.host_profile import Linear

__all__ = ["RequestCosts", "measure_requests"]

WARMUP = 50
QUEUED = 4  # clients whose requests reach the shard together in the probe's second regime


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _config():
    from psgd.config import load_config
    return load_config(None, [f"cluster.workers={QUEUED}", "consistency.mode=asp", "optimizer.name=sgd",
                              "optimizer.lr=1e-9", "cluster.timeout_s=600", "cluster.heartbeat_s=100"])


def _layout(numel: int):
    from psgd.core.sharding import make_layout
    return make_layout([("w", (numel,))], 1)


def _shards(numels: list[int], conn) -> None:
    """The shard process: one shard per size, each serving in its own thread until the client's SHUTDOWN
    (an idle one wakes every 50 ms: nothing per request); answers each "mark" with the requests each has
    served and the process's CPU so far."""
    torch.set_num_threads(1)
    from psgd.servers.shard import ShardServer
    servers = [ShardServer(_config(), 0, "127.0.0.1:0", torch.zeros(n), _layout(n).fingerprint, run_token="probe")
               for n in numels]
    threads = [threading.Thread(target=s.serve, args=(threading.Event(),), daemon=True) for s in servers]
    for t in threads:
        t.start()
    conn.send([s.address.replace("tcp://", "") for s in servers])
    while conn.recv() == "mark":
        conn.send(([s._served for s in servers], _cpu_s()))
    for t in threads:
        t.join(timeout=10)


@dataclass(frozen=True)
class EndCosts:
    """One size's CPU seconds per request: the client's (alone, lock-step) and its share before the request
    leaves; the shard's when each request finds it asleep (alone) and when QUEUED arrive together."""
    client_s: float
    client_send_share: float
    shard_s: float
    shard_queued_s: float


def _gradient(client, grad: torch.Tensor) -> torch.Tensor:
    buffer = client.gradient_buffers()[0]
    if buffer is None:
        return grad
    buffer.copy_(grad)  # a worker's flatten
    return buffer


def _alone(client, grad: torch.Tensor, model: torch.Tensor, requests: int) -> tuple[float, float]:
    """`requests` push+pulls of one client: (its process's CPU, the share of its thread's CPU spent before
    each request left)."""
    send_s, cpu0, thread0 = 0.0, _cpu_s(), time.thread_time()
    for _ in range(requests):
        t0 = time.thread_time()
        request = client.start([_gradient(client, grad)])
        send_s += time.thread_time() - t0
        model.copy_(client.wait(request)[0])  # a worker's load
    return _cpu_s() - cpu0, send_s / max(time.thread_time() - thread0, 1e-12)


def _queued(clients: list, grad: torch.Tensor, rounds: int) -> None:
    for _ in range(rounds):
        requests = [c.start([_gradient(c, grad)]) for c in clients]
        for c, r in zip(clients, requests):
            c.wait(r)


def _measure_size(address: str, numel: int, mark: Callable[[], tuple[int, float]], requests: int,
                  repeats: int) -> EndCosts:
    """One size against its shard at `address`; `mark()`: the requests that shard has served and the
    shard process's CPU so far."""
    from psgd.workers.client import PSClient

    def shard_window(run: Callable[[], object]) -> float:
        served0, cpu0 = mark()
        run()
        served1, cpu1 = mark()
        return (cpu1 - cpu0) / max(served1 - served0, 1)
    clients = [PSClient([address], _layout(numel), rank=r, heartbeat_s=None, token="probe", request_timeout_s=60,
                        max_retries=0) for r in range(QUEUED)]
    try:
        for c in clients:
            c.register()
        grad, model = torch.full((numel,), 1e-9), torch.zeros(numel)
        _alone(clients[0], grad, model, WARMUP)
        _queued(clients, grad, WARMUP // QUEUED)
        windows = []
        alone: list[tuple[float, float]] = []  # each window's client (CPU, share before it leaves)
        for _ in range(repeats):
            shard_s = shard_window(lambda: alone.append(_alone(clients[0], grad, model, requests)))
            queued_s = shard_window(lambda: _queued(clients, grad, requests // QUEUED))
            windows.append(EndCosts(alone[-1][0] / requests, alone[-1][1], shard_s, queued_s))
        clients[0].shutdown_servers(token="probe")
    finally:
        for c in clients:
            c.close()
    return sorted(windows, key=lambda w: w.client_s + w.shard_s)[len(windows) // 2]


def _measure_sizes(sizes: tuple[int, ...], requests: int, repeats: int) -> dict[int, EndCosts]:
    """Every size against its own shard, all in one spawned process."""
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_shards, args=([n // 4 for n in sizes], there), daemon=True)
    proc.start()
    try:
        if not here.poll(120):
            raise RuntimeError("the probe's shard process did not start within 120 s")
        addresses = here.recv()
        out = {}
        for i, (n, address) in enumerate(zip(sizes, addresses)):
            def mark(i=i) -> tuple[int, float]:
                here.send("mark")
                served, cpu = here.recv()
                return served[i], cpu
            out[n] = _measure_size(address, n // 4, mark, requests, repeats)
        return out
    finally:
        here.send("end")
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()


@dataclass(frozen=True)
class RequestCosts:
    """What a request costs each end beyond its parts (profile.message, the codec, the update rule)."""
    client: Linear            # the worker's process, per push+pull
    client_send_share: float  # of it, the share spent before the request leaves (the rest after its reply)
    shard: Linear             # the shard's process, per request, when it finds others queued
    shard_wake_us: float      # and more when it finds the shard asleep


def measure_requests(parts_client: Callable[[int], float], parts_shard: Callable[[int], float],
                     sizes: tuple[int, int], requests: int = 400, repeats: int = 3) -> RequestCosts:
    """`parts_client(nbytes)`, `parts_shard(nbytes)`: the seconds the profile's parts already charge each
    end for one fp32 push+pull of `nbytes`; what each end spent beyond them is fitted over `sizes`. The
    shard's wake-up is its cost alone over its cost queued, per request, scaled to a whole wake-up
    (QUEUED requests queued share one), averaged over the sizes."""
    torch.set_num_threads(1)  # as every psgd process runs (more threads spin on a shared core)
    points = _measure_sizes(sizes, requests, repeats)
    beyond = lambda spent, parts: max(spent - parts, 0.0)  # noqa: E731
    wake = {n: max(p.shard_s - p.shard_queued_s, 0.0) * QUEUED / (QUEUED - 1) for n, p in points.items()}
    client = Linear.fit(*[(n, beyond(p.client_s, parts_client(n))) for n, p in points.items()])
    shard = Linear.fit(*[(n, beyond(p.shard_s - wake[n], parts_shard(n))) for n, p in points.items()])
    share = sum(p.client_send_share for p in points.values()) / len(points)
    return RequestCosts(client, round(share, 4), shard, round(1e6 * sum(wake.values()) / len(wake), 3))
