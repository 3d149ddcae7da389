"""`psgd bench scale`'s light workers on the virtual cluster.

A light worker has no model: it computes for `compute_ms`, then pushes a fixed
gradient and waits for the parameters, again and again (psgd/bench/scale.py).
Here the same loop runs under the discrete-event clock (psgd.sim.engine) with
the shards' own ShardState in the bench's mode (asp), so the simulator's time
model (per-request service, apply rate, links, latency) can be checked
against the real bench point by point. Updates are counted as the real bench
counts them: round trips that end inside the window after the warm-up.
`calibrate_wake` splits the shard's time into a per-request and a wake part
(sim.wake_us) from a second, loaded real point.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from psgd.bench.procs import bench_config, bench_layout
from psgd.config import Config
from psgd.core.heterogeneity import straggler_for
from psgd.core.local_methods import Schedule
from psgd.runtime.event_names import Event
from psgd.servers.service import ShardService
from psgd.servers.state import ShardState
from psgd.sim.batched_steps import BatchedSteps
from psgd.sim.engine import Engine
from psgd.sim.executor import Executor, VirtualWorker
from psgd.sim.messages import Push
from psgd.sim.round_steps import RoundSteps
from psgd.sim.time_model import TimeModel
from psgd.wire.codecs import WireEncoder
from psgd.wire.codecs.runs import single_plans

__all__ = ["LightExecutor", "scale_config", "simulate_scale_point", "calibrate_from_point", "calibrate_wake"]


class LightExecutor(Executor):
    """The executor with light workers: no task, no model; each step sends the
    same small random gradient (as the real bench's light workers do)."""

    def __init__(self, cfg: Config, numel: int):  # not super().__init__: that builds a task and a model
        self.cfg = cfg
        self.num_shards = cfg.cluster.num_servers
        self.layout = bench_layout(numel, self.num_shards)
        sizes = self.layout.shard_sizes
        self.shards = [ShardState(cfg, s, torch.zeros(n)) for s, n in enumerate(sizes)]
        self.services = [ShardService(shard) for shard in self.shards]
        self.binding, self._f32 = None, [True] * len(sizes)
        self.batched, self.schedule = BatchedSteps(self, None, None), Schedule.ROUNDS
        self.steps = RoundSteps(self)  # plain steps: every reply of a round starts the next
        self.plans = single_plans(["none"] * len(sizes), sizes)  # every push one fp32 run, as the bench's
        self._free = [[] for _ in sizes]
        self.now = 0.0
        self.gradient_s = self.evaluate_s = self.shard_s = 0.0
        self.reply_encoding, self._pulled = "none", None  # the bench's replies are fp32
        gen = torch.Generator().manual_seed(cfg.run.seed)
        self.grads = [torch.randn(n, generator=gen) * 1e-3 for n in sizes]
        self.workers = []
        for rank in range(cfg.cluster.workers):
            reads = [self._read(s) for s in range(self.num_shards)]
            w = VirtualWorker(rank, iter(()), WireEncoder("none", sizes), straggler_for(cfg.workers, rank, 0),
                              [p for p, _ in reads], [0] * self.num_shards, [r for _, r in reads])
            w.adopt(self._joined(s, service.register(rank, 0.0)) for s, service in enumerate(self.services))
            self.workers.append(w)

    def compute(self, rank: int, step_s: float = 0.0, round_steps: Optional[int] = None) -> list[Push]:
        w = self.workers[rank]
        self.stepped_on(w)
        w.steps += 1
        return self.send(w, self.grads, step_s)

    def evaluate(self) -> dict:
        versions = [shard.version for shard in self.shards]
        return {"accuracy": 0.0, "test_loss": 0.0, "updates": max(versions), "versions": versions}

    def state_dict(self) -> dict:
        return {}


def scale_config(workers: int, shards: int, sim: dict) -> Config:
    """The real bench's shard config (bench_config) with `sim` as its time model."""
    cfg = bench_config(workers)
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=shards))
    return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, **sim))


def simulate_scale_point(shards: int, workers: int, numel: int, sim: dict, warmup_s: float = 1.0,
                         window_s: float = 3.0) -> dict:
    """One (shards, workers) point: updates/s counted over the window, the
    median simulated round trip, and the shards' mean service per request and
    share of requests that found their shard idle (over the whole run)."""
    cfg = scale_config(workers, shards, sim)
    ex = LightExecutor(cfg, numel)
    lo, hi = warmup_s, warmup_s + window_s
    done, rtts = [0], []

    def emit(e: dict) -> None:
        if e["event"] == Event.STEP and lo <= e["t"] < hi:
            done[0] += 1
            rtts.append(e["comm_s"])

    engine = Engine(ex, TimeModel.from_config(cfg.sim, cfg.sim.compute_ms), steps_per_worker=10 ** 9,
                    max_time_s=hi, eval_every_s=None, emit=emit)
    engine.run()
    rtts.sort()
    arrivals = max(1, sum(engine.arrivals))
    return {"shards": shards, "workers": workers, "updates_per_s": round(done[0] / window_s, 2),
            "pull_latency_ms_median": round(rtts[len(rtts) // 2] * 1e3, 3) if rtts else None,
            "service_us_mean": round(sum(engine.served_s) / arrivals * 1e6, 3),
            "idle_share": round(sum(engine.wakes) / arrivals, 4)}


def calibrate_from_point(row: dict, numel: int, bandwidth_gbps: float = 25.0, apply_gbytes_per_s: float = 15.0) -> dict:
    """The sim: section one real bench-scale point implies (in the spirit of
    psgd sim calibrate): per-request service from the shard's CPU per request,
    step time from the workers' cycle less the round trip, latency from what
    the round trip leaves after service and transfers."""
    shards, ups = row["shards"], row["updates_per_s"]
    rtt_s = row["pull_latency_ms_median"] / 1e3
    service_s = row["shard_cpu_cores"] / ups            # each update is one request to every shard
    per_shard = numel // shards
    apply_s = 4 * per_shard / (apply_gbytes_per_s * 1e9)
    transfer_s = 2 * 4 * per_shard * shards / (bandwidth_gbps * 1e9 / 8)  # every shard's push and reply: one link
    cycle_s = row["workers"] / ups
    return {"compute_ms": round((cycle_s - rtt_s) * 1e3, 6), "speedup": 1.0,
            "request_us": round(max(0.0, service_s - apply_s) * 1e6, 3),
            # A round trip crosses four links (worker's and shard's, each way): latency_us is one link's.
            "latency_us": round(max(0.0, (rtt_s - service_s - transfer_s) / 4) * 1e6, 3),
            "bandwidth_gbps": bandwidth_gbps, "apply_gbytes_per_s": apply_gbytes_per_s}


def calibrate_wake(base: dict, loaded: dict, numel: int, sim: dict, precision_us: float = 1e-3,
                   tolerance: float = 1e-4) -> dict:
    """`sim` (calibrated from the 1-worker point `base`) with its shard time split
    into a per-request part and a wake part (sim.wake_us) so that the loaded
    point's simulated service per request equals the real shard CPU per request
    there. At one worker every request finds the shard idle, so request + wake
    stays the base point's service and that point is reproduced as before. The
    loaded point's simulated service falls as more of it is wake (fewer requests
    pay it), so the split is bracketed and found by regula falsi (the Illinois
    variant: a few simulations rather than bisection's twenty), until the service
    is within `tolerance` of the target or the bracket is narrower than
    `precision_us`, the resolution the result is rounded to."""
    total_us = sim["request_us"] + sim.get("wake_us", 0.0)
    target_us = 1e6 * loaded["shard_cpu_cores"] / loaded["updates_per_s"]

    def excess(wake_us: float) -> float:
        trial = {**sim, "request_us": total_us - wake_us, "wake_us": wake_us}
        return simulate_scale_point(loaded["shards"], loaded["workers"], numel, trial)["service_us_mean"] - target_us

    lo, hi = 0.0, total_us
    f_lo, f_hi = excess(lo), excess(hi)
    if f_hi >= 0:  # even all wake cannot make it that cheap: the closest split
        lo = hi
    elif f_lo <= 0:  # no wake at all is already as cheap
        hi = lo
    side = 0  # which end the last two steps kept (Illinois halves a stuck end's value)
    while hi - lo > precision_us:
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f_mid = excess(mid)
        if abs(f_mid) <= tolerance * target_us:
            lo = hi = mid
            break
        if f_mid > 0:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo /= 2
            side = 1
    wake = round(lo, 3)
    return {**sim, "request_us": round(total_us - wake, 3), "wake_us": wake}
