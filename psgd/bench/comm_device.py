"""`psgd bench comm --device D`: the round trip of a worker whose model lives on D.

A GPU worker pushes gradients from device memory and takes parameters back into
it, staged through pinned host buffers with non-blocking copies and one
synchronise each way (psgd.workers.model_sync). Timed alternately from one
process, one of each per iteration in an order shuffled afresh (seeded), every
one ending with the device idle:
- psgd: ModelSync and PSClient against real shard processes, as the built-in
  worker's step() does it, staged through pinned buffers (`workers.pin_memory`);
- psgd_pageable: the same with pin_memory off;
- psgd_host: the same bytes pushed from host tensors (a CPU worker's round trip):
  psgd less psgd_host is what the staging costs;
- copies_pinned / copies_pageable: the device-to-host and host-to-device copies
  of the same bytes alone, through pinned or pageable buffers: the staging's floor.
torch.rpc is timed in its own process pair: the trainer copies its device
gradient to the host for the call and the reply back to the device (TensorPipe
sends device tensors only with device maps, to a server on a device; psgd's
shards keep their state on the host). On the CPU every "copy" is a host copy:
the rows then check the code path, not a device.
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Callable, Optional

import torch
from torch import nn

from psgd.bench.procs import BenchShards
from psgd.bench.rpc_ps import time_torch_rpc_ps
from psgd.runtime.devices import wait_for_device
from psgd.workers.client import PSClient
from psgd.workers.model_sync import ModelSync

__all__ = ["run_device_comm_bench", "device_comm_table", "DEVICE_PEERS"]

# Timed in the shuffled loop (psgd first: the ratios are psgd's to each).
DEVICE_PEERS = ("psgd", "psgd_pageable", "psgd_host", "copies_pinned", "copies_pageable")


class _DeviceWorker:
    """A one-tensor model on `device` and the client and staging a worker gives it."""

    def __init__(self, cluster: BenchShards, rank: int, device: torch.device, pin: bool):
        self.device = device
        self.model = nn.Module()
        self.model.w = nn.Parameter(torch.zeros(cluster.numel, device=device))
        self.model.w.grad = torch.randn(cluster.numel, device=device) * 1e-3
        self.client = PSClient(cluster.addresses, cluster.layout, rank=rank, heartbeat_s=None, token=cluster.token)
        self.sync = ModelSync(self.model, cluster.layout, device, pin_memory=pin)
        self.sync.gradient_buffers = self.client.gradient_buffers
        self.sync.load(self.client.register())

    @property
    def pinned(self) -> bool:
        return bool(self.sync.host_grads[0].is_pinned())

    def round_trip(self) -> int:
        """One step()'s communication: gradients off the device, parameters back onto it."""
        params = self.client.push_pull(self.sync.gradients())
        self.sync.load(params)
        wait_for_device(self.device)
        return sum(t.numel() for t in params) * 4


class _Copies:
    """The staging alone: device -> host -> device of `numel` fp32 elements."""

    def __init__(self, numel: int, device: torch.device, pin: bool):
        self.device = device
        self.src = torch.randn(numel, device=device)
        self.dst = torch.empty(numel, device=device)
        self.host = torch.empty(numel, pin_memory=pin and device.type == "cuda")

    def round_trip(self) -> int:
        self.host.copy_(self.src, non_blocking=True)
        wait_for_device(self.device)  # the host buffer is complete, as before a send
        self.dst.copy_(self.host, non_blocking=True)
        wait_for_device(self.device)
        return self.dst.numel() * 4


def _time_row(size_bytes: int, shards: int, device: torch.device, warmup: int, repeats: int) -> tuple[dict, dict]:
    numel = size_bytes // 4
    with BenchShards(numel, shards, workers=3) as cluster:
        workers = [_DeviceWorker(cluster, 0, device, pin=True), _DeviceWorker(cluster, 1, device, pin=False)]
        host = PSClient(cluster.addresses, cluster.layout, rank=2, heartbeat_s=None, token=cluster.token)
        try:
            host.register()
            grads = [torch.randn(n) * 1e-3 for n in cluster.layout.shard_sizes]
            copies = [_Copies(numel, device, pin=True), _Copies(numel, device, pin=False)]
            trips: dict[str, Callable[[], int]] = {
                "psgd": workers[0].round_trip, "psgd_pageable": workers[1].round_trip,
                "psgd_host": lambda: sum(t.numel() for t in host.push_pull(grads)) * 4,
                "copies_pinned": copies[0].round_trip, "copies_pageable": copies[1].round_trip,
            }
            times: dict[str, list[float]] = {name: [] for name in trips}
            order, shuffle = list(trips), random.Random(size_bytes).shuffle
            for i in range(warmup + repeats):
                shuffle(order)
                for name in order:
                    t0 = time.perf_counter()
                    got = trips[name]()
                    dt = time.perf_counter() - t0
                    if got != size_bytes:
                        raise RuntimeError(f"{name} round trip moved {got} bytes, not {size_bytes}")
                    if i >= warmup:
                        times[name].append(dt)
            staging = {"pinned": workers[0].pinned, "pageable_is_pinned": workers[1].pinned}
        finally:
            host.shutdown_servers(token=cluster.token)
            for c in [host] + [w.client for w in workers]:
                c.close()
    return times, staging


def run_device_comm_bench(sizes: list[int], shards: list[int], device: str, repeats: int = 30, warmup: int = 3,
                          on_row: Optional[Callable[[dict], None]] = None) -> dict:
    """Blocks for the whole benchmark; returns {"device", "rows": [...], ...}, every time a
    median in ms and every ratio from the medians of this run."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # this process is the worker: one thread, like a worker
    rows = []
    try:
        for size in sizes:
            rpc = time_torch_rpc_ps(size // 4, warmup, repeats, device=device)
            for s in shards:
                times, staging = _time_row(size, s, dev, warmup, repeats)
                rows.append(_row(size, s, times, rpc, staging))
                if on_row is not None:
                    on_row(rows[-1])
    finally:
        torch.set_num_threads(threads)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return {"device": device, "device_name": name, "rows": rows, "repeats": repeats, "warmup": warmup,
            "torch": torch.__version__}


def _row(size_bytes: int, shards: int, times: dict[str, list[float]], rpc: list[float], staging: dict) -> dict:
    ms = {f"{k}_ms": statistics.median(v) * 1e3 for k, v in times.items()}
    ms["torch_rpc_ms"] = statistics.median(rpc) * 1e3
    psgd = ms["psgd_ms"]
    return {"size_bytes": size_bytes, "shards": shards, **{k: round(v, 4) for k, v in ms.items()},
            "staging_ms": round(psgd - ms["psgd_host_ms"], 4),
            "psgd_over_psgd_host": round(psgd / ms["psgd_host_ms"], 4),
            "psgd_over_copies_pinned": round(psgd / ms["copies_pinned_ms"], 4),
            "psgd_pageable_over_psgd": round(ms["psgd_pageable_ms"] / psgd, 4),
            "torch_rpc_over_psgd": round(ms["torch_rpc_ms"] / psgd, 4),
            "repeats": len(times["psgd"]), **staging}


def device_comm_table(result: dict) -> list[str]:
    """A markdown table of the rows."""
    lines = [f"Device: {result['device']} ({result['device_name']}), torch {result['torch']}; medians of "
             f"{result['repeats']} round trips, ms.", "",
             "| bytes | shards | psgd (pinned) | psgd pageable | psgd from host | copies pinned | copies pageable "
             "| torch.rpc | torch.rpc / psgd | psgd / copies |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['size_bytes']} | {r['shards']} | {r['psgd_ms']:.3f} | {r['psgd_pageable_ms']:.3f} | "
              f"{r['psgd_host_ms']:.3f} | {r['copies_pinned_ms']:.3f} | {r['copies_pageable_ms']:.3f} | "
              f"{r['torch_rpc_ms']:.3f} | {r['torch_rpc_over_psgd']:.2f} | {r['psgd_over_copies_pinned']:.2f} |"
              for r in result["rows"]]
    return lines
