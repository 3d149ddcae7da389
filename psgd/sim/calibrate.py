"""`psgd sim calibrate RUN_DIR`: the `sim:` section that reproduces a real run's times.

Read from the run's events (metrics.jsonl), nothing re-measured. Every key it
writes is fitted from them:
- compute_ms: a worker's own time per step, the mean over steps of the time
  between two of its steps less the step's round trip (`comm_s`): the forward
  and backward, loading the batch, and the rest of the loop. The mean, so the
  run's length is kept; ranks with a straggler model are left out (the
  simulator adds their delay again).
- compute_jitter: the spread of those times within each rank, as the CV of the
  lognormal (psgd.core.step_time) whose 10th and 90th percentiles they have: robust
  to the few steps a preemption makes very long, which a sample CV is not.
- worker_spread: the spread of the ranks' mean times beyond what the jitter
  alone gives n steps (a persistent speed difference).
- request_us: each shard's time per push (its `busy_s` over the pushes it
  served), less the apply and decode times the config's rates account for (each
  shard's own codecs, as the run's `wire.compression` chose them: on the shard
  sizes it recorded, or under choose_by: tensor on its model's layout).
- latency_us: what is left of a round trip without waiting, after the shard's
  service, its wait behind other pushes and the transfers (every shard's push
  and reply through the worker's link, as the simulator streams them),
  over the four links a round trip crosses. Without waiting: under asp every
  round trip; otherwise, for each clock, only the round trip of the worker whose
  push of that clock left last (nobody is behind it, so BSP's barrier and SSP's
  bound did not hold its pull); their mean. The wait behind other pushes is a
  shard's queue replayed over every push's departure at the fitted service per
  push: the simulator queues pushes itself, so it is not the network's (under a
  barrier the last push of a clock finds the others still being served). Nor is,
  under a barrier or bound, the last pusher's wait behind the other replies its
  push released: the simulator sends the n released together in a seeded order
  over the shard's link, (n - 1) / 2 replies ahead of it on average, and that
  expectation is what is taken out (a real wait beyond it, a host's scheduling
  or a shard that answers the last pusher last, stays in the latency, so the
  calibrated simulator still reproduces its run).
Bandwidth, apply and codec rates and wake_us are kept from the config: one
message size cannot tell a link's latency from its bandwidth, nor one load a
wake from a request. The run's CPU load is checked against the cores of its
own hosts (its ready events record them; this machine's do not matter): a run
with more busy processes than cores measured waiting for a core, and says so (a
run with `workers.device_ms` computes mostly by sleeping: its compute is not
counted). A run that recorded no cores (made before its ready events carried
them) is not judged.
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from psgd.config import Config, ConfigError, Mode, Role, load_config
from psgd.config.operations import ChooseBy
from psgd.runtime.event_names import Event
from psgd.runtime.events import read_events
from psgd.sim.plan import model_plans
from psgd.sim.time_model import Fifo, TimeModel, stream, stream_together
from psgd.tasks import task_shape
from psgd.wire.codecs import encodings_for
from psgd.wire.codecs.runs import Plan, single_plans

__all__ = ["Calibration", "calibrate"]

SPREAD_Q = 0.1        # compute spread from the 10th and 90th percentiles
_Z = statistics.NormalDist().inv_cdf(1 - SPREAD_Q)
MIN_STEPS = 10


@dataclass(frozen=True)
class Calibration:
    sim: dict          # the sim: section (only the keys fitted)
    evidence: dict     # what it was computed from
    warnings: list[str] = field(default_factory=list)

    def config(self, cfg: Config) -> Config:
        """`cfg` with this sim: section; compute_ms is the run's own, so no speed-up."""
        return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, speedup=1.0, step_times_from=None,
                                                                **self.sim))


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def lognormal_cv(ratios: list[float]) -> float:
    """CV of the lognormal with the 10th-90th percentile spread of `ratios` (0: none)."""
    low, high = _quantile(ratios, SPREAD_Q), _quantile(ratios, 1 - SPREAD_Q)
    if low <= 0 or high <= low:
        return 0.0
    sigma = math.log(high / low) / (2 * _Z)
    return math.sqrt(math.expm1(sigma ** 2))


def _number(e: dict, key: str, n: int) -> float:
    value = e.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError("metrics.jsonl", f"event {n} ({e.get('event')} of {e.get('role')} {e.get('index')}) "
                          f"has no numeric {key!r}: not a run psgd recorded, or damaged")
    return float(value)


def _events(run_dir: Path) -> list[dict]:
    try:
        events = read_events(run_dir / "metrics.jsonl")  # ValueError (with UnicodeDecodeError) on a damaged line
    except OSError as exc:
        raise ConfigError("metrics.jsonl", f"cannot read it: {exc.strerror or exc}") from None
    bad = next((i for i, e in enumerate(events, 1) if not isinstance(e, dict)), None)
    if bad is not None:
        raise ConfigError("metrics.jsonl", f"line {bad} is not an event object")
    return events


def _check_real(run_dir: Path) -> None:
    path = run_dir / "summary.json"
    if not path.is_file():
        return  # a run still going, or killed: its events may still calibrate
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("summary.json", f"unreadable: {exc}") from None
    if not isinstance(summary, dict):
        raise ConfigError("summary.json", "is not a JSON object: not a summary psgd wrote")
    if summary.get("clock") == "simulated":
        raise ConfigError("cluster.launcher", "this run was simulated: calibrate from a real run")


def _own_times(steps: list[dict], skip: set[int]) -> dict[int, list[float]]:
    """Per rank: the time between consecutive steps less the later one's round trip."""
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for e in steps:
        by_rank[e["rank"]].append(e)
    own: dict[int, list[float]] = {}
    for rank, evs in by_rank.items():
        if rank in skip:
            continue
        evs.sort(key=lambda e: e["t"])
        times = [b["t"] - a["t"] - b["comm_s"] for a, b in zip(evs, evs[1:])]
        own[rank] = [x for x in times if x > 0]
    return {r: x for r, x in own.items() if x}


def _push_plans(cfg: Config, run_dir: Path, numel: dict) -> list[Plan]:
    """Each shard's push runs in the run: one codec a shard, chosen on the shard sizes its ready
    events recorded; under choose_by: tensor, the runs of its model's layout (built from its config)."""
    choice = cfg.wire.compression
    if isinstance(choice, str) or choice.choose_by is not ChooseBy.TENSOR:
        sizes = [numel[s] for s in sorted(numel)]
        return single_plans(encodings_for(cfg.wire, sizes, cfg.local.enabled), sizes)
    return model_plans(cfg, task_shape(cfg, run_dir))[1]


def _queue_waits(steps: list[dict], service_s: float) -> list[float]:
    """Each step's push: its wait at a shard behind earlier pushes, one queue serving
    `service_s` per push replayed over the pushes' departures (t - comm_s). Every push
    reaches every shard over alike links, so arrivals are departures shifted alike,
    which the waits do not depend on."""
    waits = [0.0] * len(steps)
    free_at = -math.inf
    for i in sorted(range(len(steps)), key=lambda i: steps[i]["t"] - steps[i]["comm_s"]):
        sent = steps[i]["t"] - steps[i]["comm_s"]
        start = max(sent, free_at)
        waits[i], free_at = start - sent, start + service_s
    return waits


def _round_trip_transfers_s(model: TimeModel, shards: int, push_bytes: int, reply_bytes: int) -> float:
    """The links' share of one worker's round trip alone, streamed as the simulator streams it (its
    pushes to every shard share its link; the shards' replies queue into it), latencies left out."""
    one_way = model.worker_link.latency_s + model.shard_link.latency_s
    up = max(stream_together(Fifo(), model.worker_link, [(Fifo(), model.shard_link) for _ in range(shards)], 0.0,
                             [push_bytes] * shards))
    into_worker = Fifo()
    down = max(stream(Fifo(), model.shard_link, into_worker, model.worker_link, 0.0, reply_bytes)
               for _ in range(shards))
    return up + down - 2 * one_way


def _run_cores(events: list[dict]) -> int | None:
    """The cores of the hosts the run's shards and workers ran on, as their ready events
    recorded them (psgd.runtime.host); None for a run that did not record them."""
    hosts = {e.get("host"): e["cores"] for e in events
             if e.get("event") == Event.READY and e.get("role") in (Role.SERVER, Role.WORKER)
             and isinstance(e.get("cores"), int) and not isinstance(e.get("cores"), bool) and e["cores"] > 0}
    return sum(hosts.values()) if hosts else None


def _straggler_ranks(cfg: Config) -> set[int]:
    from psgd.core.heterogeneity import straggler_for
    return {r for r in range(cfg.cluster.workers) if straggler_for(cfg.workers, r, cfg.run.seed).active}


def calibrate(run_dir: Path) -> Calibration:
    """Raises ConfigError (naming what is missing or damaged) for a run that cannot calibrate."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{run_dir} is not a run directory (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml")
    if not cfg.consistency.mode.on_servers:
        raise ConfigError("consistency.mode", "calibrate from a parameter-server run: an all-reduce run has no shards")
    _check_real(run_dir)
    events = _events(run_dir)
    steps = []
    for n, e in enumerate(events, 1):
        if e.get("event") == Event.STEP and e.get("role") == Role.WORKER:
            steps.append({"t": _number(e, "t", n), "rank": int(_number(e, "rank", n)),
                          "clock": int(_number(e, "clock", n)), "compute_s": _number(e, "compute_s", n),
                          "comm_s": _number(e, "comm_s", n)})
    if len(steps) < MIN_STEPS:
        raise ConfigError("metrics.jsonl", f"{len(steps)} worker steps recorded: too few to calibrate from "
                          f"(at least {MIN_STEPS})")
    if not any(s["compute_s"] > 0 for s in steps):
        raise ConfigError("metrics.jsonl", "every recorded compute_s is 0: no compute time to calibrate from")
    finals = {e.get("index"): e for e in events if e.get("event") == Event.SERVER_STATS and e.get("role") == Role.SERVER}
    if not finals or any("busy_s" not in e for e in finals.values()):
        raise ConfigError("metrics.jsonl", "the shards' stats carry no service times (a psgd older than calibrate)")
    busy = {s: _number(e, "busy_s", 0) for s, e in finals.items()}
    requests = sum(_number(e, "requests", 0) for e in finals.values())
    numel = {e.get("index"): e.get("numel") for e in events
             if e.get("event") == Event.READY and e.get("role") == Role.SERVER}
    if not numel or not all(isinstance(v, int) and v > 0 for v in numel.values()):
        raise ConfigError("metrics.jsonl", "the shards' ready events carry no parameter count (numel)")
    dones = [e for e in events if e.get("event") == Event.DONE and e.get("role") == Role.WORKER
             and isinstance(e.get("pushes"), int) and e["pushes"] > 0 and isinstance(e.get("bytes_sent"), int)]

    shards = cfg.cluster.num_servers
    largest = max(numel.values())
    pushes = sum(e["pushes"] for e in dones) or len(steps)  # every push reaches every shard

    # ---- compute: a worker's own time per step, its spread and the ranks' spread ----
    skip = _straggler_ranks(cfg)
    own = _own_times(steps, skip)
    if not own or sum(len(x) for x in own.values()) < MIN_STEPS:  # too few consecutive steps: the forward+backward
        own = {r: [s["compute_s"] for s in steps if s["rank"] == r and s["compute_s"] > 0]
               for r in {s["rank"] for s in steps} - skip} or {0: [s["compute_s"] for s in steps if s["compute_s"] > 0]}
        own = {r: x for r, x in own.items() if x}
    pooled = [x for times in own.values() for x in times]
    compute_s = statistics.fmean(pooled)
    rank_means = {r: statistics.fmean(x) for r, x in own.items()}
    jitter = lognormal_cv([x / rank_means[r] for r, times in own.items() for x in times])
    spread = 0.0
    if len(rank_means) > 1:
        means = list(rank_means.values())
        noise = statistics.fmean(statistics.pvariance(x) / len(x) for x in own.values())  # the means' own error
        spread = math.sqrt(max(0.0, statistics.pvariance(means) - noise)) / statistics.fmean(means)

    # ---- the shards' service per push, less what the rates already charge ----------
    model = TimeModel.for_run(cfg, compute_s * 1e3, _push_plans(cfg, run_dir, numel))
    service_s = sum(busy.values()) / shards / pushes
    rates_s = model.service_s(largest, shard=max(numel, key=numel.get)) - model.request_s  # decode and apply

    # ---- latency from round trips no barrier held -----------------------------------
    for s, wait in zip(steps, _queue_waits(steps, service_s)):
        s["queue_s"] = wait
    # A reply's bytes as sent (wire.compression.replies): the workers count them against fp32.
    pulled = [(e["pull_bytes"], e["pull_fp32_bytes"]) for e in dones
              if isinstance(e.get("pull_bytes"), int) and isinstance(e.get("pull_fp32_bytes"), int)]
    fp32_pulled = sum(f for _, f in pulled)
    reply_bytes = round(4 * largest * sum(b for b, _ in pulled) / fp32_pulled) if fp32_pulled else 4 * largest
    reply_wait_s = 0.0
    if cfg.consistency.mode is Mode.ASP:  # no pull ever waits for another worker
        free = steps
    else:
        last_of_clock: dict[int, dict] = {}
        for s in steps:
            held = last_of_clock.get(s["clock"])
            if held is None or s["t"] - s["comm_s"] > held["t"] - held["comm_s"]:
                last_of_clock[s["clock"]] = s
        free = list(last_of_clock.values())
        released: dict[int, int] = defaultdict(int)  # a clock's workers answered after its last push left
        for s in steps:
            last = last_of_clock[s["clock"]]
            released[s["clock"]] += s["t"] >= last["t"] - last["comm_s"]
        # Released together, their replies leave each shard's link in a seeded order: the last
        # pusher's waits (n - 1) / 2 replies on average, as the simulator will charge it.
        reply_s = model.shard_link.transfer_s(reply_bytes)
        reply_wait_s = statistics.fmean((released[c] - 1) / 2 * reply_s for c in last_of_clock)
    free_comm = [s["comm_s"] for s in free]
    free_comm_s = statistics.fmean(free_comm)
    queue_s = statistics.fmean(s["queue_s"] for s in free)
    up_bytes = (sum(e["bytes_sent"] for e in dones) / sum(e["pushes"] for e in dones) / shards) if dones \
        else 4 * largest
    transfers_s = _round_trip_transfers_s(model, shards, round(up_bytes), reply_bytes)
    # What the simulator charges around the wire itself: encoding before the push, decoding the reply after.
    network_s = (free_comm_s - queue_s - reply_wait_s - service_s - transfers_s
                 - model.before_push_s([largest] * shards, range(shards)) - model.after_pull_s(sum(numel.values())))

    sim = {"compute_ms": round(compute_s * 1e3, 6), "compute_jitter": round(jitter, 4),
           "worker_spread": round(spread, 4), "request_us": round(max(0.0, service_s - rates_s) * 1e6, 3),
           "latency_us": round(max(0.0, network_s / 4) * 1e6, 3)}

    wall_s = max(s["t"] for s in steps)
    # With a stated device time the workers' compute_s is mostly a sleep (workers.device_ms): not a busy core.
    waited = cfg.workers.device_ms is not None
    busy_compute_s = 0.0 if waited else sum(s["compute_s"] for s in steps)
    load = (busy_compute_s + sum(busy.values())) / wall_s if wall_s > 0 else 0.0
    cores = _run_cores(events)
    warnings = []
    if cores is not None and load > cores:
        warnings.append(f"the run kept about {load:.1f} processes busy on its {cores} cores: it was "
                        "CPU-bound, so its compute times include waiting for a core, which a cluster of "
                        "accelerators does not have; calibrate from a run with fewer processes than cores")
    evidence = {"worker_steps": len(steps), "shards": shards, "workers": cfg.cluster.workers,
                "ranks_fitted": sorted(own), "stragglers_left_out": sorted(skip),
                "own_ms_mean": round(compute_s * 1e3, 6),
                "compute_ms_median": round(statistics.median(s["compute_s"] for s in steps) * 1e3, 6),
                "own_ms_p10_p90": [round(_quantile(pooled, q) * 1e3, 6) for q in (SPREAD_Q, 1 - SPREAD_Q)],
                "service_us_per_push": round(service_s * 1e6, 3),
                "service_us_per_request": round(sum(busy.values()) / max(1.0, requests) * 1e6, 3),
                "unwaited_round_trips": len(free_comm), "unwaited_comm_ms_mean": round(free_comm_s * 1e3, 6),
                "push_queue_ms_mean": round(queue_s * 1e3, 6), "reply_queue_ms_mean": round(reply_wait_s * 1e3, 6),
                "comm_ms_mean": round(statistics.fmean(s["comm_s"] for s in steps) * 1e3, 6),
                "push_bytes_per_shard": round(up_bytes), "reply_bytes_per_shard": reply_bytes,
                "cpu_load": round(load, 3), "cpu_load_counts_compute": not waited, "cores": cores,
                "kept": {"bandwidth_gbps": cfg.sim.bandwidth_gbps, "apply_gbytes_per_s": cfg.sim.apply_gbytes_per_s,
                         "wake_us": cfg.sim.wake_us}}
    return Calibration(sim, evidence, warnings)
