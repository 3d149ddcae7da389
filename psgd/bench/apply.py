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
from psgd.core.local_methods.optimizers import server_optimizer
from psgd.core.rules.updater import ShardUpdater, all_finite
from psgd.servers.state import PushStatus, ShardState

__all__ = ["apply_throughput", "guard_cost", "run_apply_bench"]


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


def guard_cost(size_bytes: int, optimizer: str, repeats: int = 30, warmup: int = 3) -> dict:
    """What the non-finite guard adds to one update, timed side by side in one loop: the
    update alone (`ShardUpdater.apply`), the update behind the gradient's finiteness check
    alone (the check every push had before the guard), and the guarded update as a shard
    runs it (`grad_bound`: one pass over the gradient for both the check and the bound, then
    `apply_if_finite`). The guard's cost is the last minus the second. Timed in the thread's
    CPU time (the updates run on this one thread): other processes on the machine then
    inflate it far less than they would wall time."""
    numel = size_bytes // 4
    grad = torch.randn(numel) * 1e-3
    cfg = server_optimizer(bench_config(1, optimizer))

    def update(p, rule):
        rule.apply(p, grad)

    def checked(p, rule):
        if all_finite(grad):
            rule.apply(p, grad)

    def guarded(p, rule):
        if not rule.apply_if_finite(p, grad, grad_max=rule.grad_bound(p, grad)):
            raise RuntimeError("the bench's update was refused")

    variants = {"update": update, "checked": checked, "guarded": guarded}
    setups = {name: (p, ShardUpdater(cfg, p)) for name, p in ((n, torch.zeros(numel)) for n in variants)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(warmup + repeats):
        # Each round starts with the next variant: which one finds the gradient in the cache after the
        # one before is the same for all of them over the rounds.
        for name in names[i % len(names):] + names[:i % len(names)]:
            run = variants[name]
            t0 = time.thread_time()
            run(*setups[name])
            if i >= warmup:
                times[name].append(time.thread_time() - t0)
    ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    guard = ms["guarded"] - ms["checked"]
    return {"optimizer": optimizer, "size_bytes": size_bytes, "update_ms": round(ms["update"], 4),
            "checked_update_ms": round(ms["checked"], 4), "guarded_update_ms": round(ms["guarded"], 4),
            "guard_ms": round(guard, 4), "guard_share_of_update": round(guard / ms["update"], 4),
            "copies": setups["guarded"][1]._kept is not None, "repeats": repeats}


def run_apply_bench(sizes: list[int], optimizers: list[str], repeats: int = 30) -> dict:
    torch.set_num_threads(1)
    return {"rows": [apply_throughput(size, opt, repeats) for opt in optimizers for size in sizes],
            "guard": [guard_cost(size, opt, repeats) for opt in optimizers for size in sizes],
            "threads": torch.get_num_threads(), "load_avg_end": round(os.getloadavg()[0], 2)}
