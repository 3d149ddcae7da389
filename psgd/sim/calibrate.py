"""`psgd sim calibrate RUN_DIR`: the `sim:` section that reproduces a real run's times.

Read from the run's events (metrics.jsonl), nothing re-measured:
- compute_jitter: the spread of those forward+backward times (`compute_s` of
  the workers' step events; a straggler's sleep is not in it), as the CV of the
  lognormal (psgd.core.step_time) whose 10th and 90th percentiles they have: robust
  to the few steps a preemption makes very long, which a sample CV is not;
- compute_ms: the mean of that lognormal with the steps' median as its median
  (median x exp(sigma^2 / 2)); with no spread, the median itself;
- request_us: each shard's time handling requests (`busy_s` / `requests` of
  its final server_stats), less the apply time the `apply_gbps` already given
  accounts for;
- latency_us: what is left of a quiet round trip (the lower quartile of the
  workers' `comm_s`: little queueing in it) after the shard's service and the
  transfers at `bandwidth_gbps`, split over the two directions.
Bandwidth and apply rate are kept from the config: one message size cannot
tell a link's latency from its bandwidth. The rest of the time model (queueing
at a shard, its link shared by every worker) is the simulator's own.
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from psgd.config import Config, ConfigError, Role, load_config
from psgd.runtime.event_names import Event
from psgd.runtime.events import read_events

__all__ = ["Calibration", "calibrate"]

QUIET_QUANTILE = 0.5  # the typical round trip: on a shared machine its waiting is part of the link
SPREAD_Q = 0.1        # compute spread from the 10th and 90th percentiles
_Z = statistics.NormalDist().inv_cdf(1 - SPREAD_Q)


@dataclass(frozen=True)
class Calibration:
    sim: dict          # the sim: section
    evidence: dict     # what it was computed from

    def config(self, cfg: Config) -> Config:
        """`cfg` with this sim: section."""
        return dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, **self.sim))


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def compute_spread(compute_s: list[float]) -> tuple[float, float]:
    """(mean compute seconds, CV) of the lognormal with the steps' median and
    10th-90th percentile spread."""
    median = statistics.median(compute_s)
    low, high = _quantile(compute_s, SPREAD_Q), _quantile(compute_s, 1 - SPREAD_Q)
    if low <= 0 or high <= low:
        return median, 0.0
    sigma = math.log(high / low) / (2 * _Z)
    return median * math.exp(sigma ** 2 / 2), math.sqrt(math.expm1(sigma ** 2))


def calibrate(run_dir: Path) -> Calibration:
    """Raises ConfigError (naming what is missing) for a run that cannot calibrate."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{run_dir} is not a run directory (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml")
    if not cfg.consistency.mode.on_servers:
        raise ConfigError("consistency.mode", "calibrate from a parameter-server run: an all-reduce run has no shards")
    summary = run_dir / "summary.json"
    if summary.is_file() and json.loads(summary.read_text()).get("clock") == "simulated":
        raise ConfigError("cluster.launcher", "this run was simulated: calibrate from a real run")
    events = read_events(run_dir / "metrics.jsonl")
    steps = [e for e in events if e.get("event") == Event.STEP and e.get("role") == Role.WORKER]
    if len(steps) < 10:
        raise ConfigError("metrics.jsonl", f"{len(steps)} worker steps recorded: too few to calibrate from")
    finals = {e["index"]: e for e in events if e.get("event") == Event.SERVER_STATS and e.get("role") == Role.SERVER}
    if not finals or any("busy_s" not in e for e in finals.values()):
        raise ConfigError("metrics.jsonl", "the shards' stats carry no service times (a psgd older than calibrate)")
    dones = [e for e in events if e.get("event") == Event.DONE and e.get("role") == Role.WORKER and e.get("pushes")]
    numel = {e["index"]: e["numel"] for e in events if e.get("event") == Event.READY and e.get("role") == Role.SERVER}
    shards = cfg.cluster.num_servers
    largest = max(numel.values())
    computes = [e["compute_s"] for e in steps]
    compute_s, jitter = compute_spread(computes)
    service_s = sum(e["busy_s"] for e in finals.values()) / max(1, sum(e["requests"] for e in finals.values()))
    apply_s = 4 * largest / (cfg.sim.apply_gbytes_per_s * 1e9)
    up_bytes = (sum(e["bytes_sent"] for e in dones) / sum(e["pushes"] for e in dones) / shards) if dones \
        else 4 * largest
    bytes_per_s = cfg.sim.bandwidth_gbps * 1e9 / 8
    quiet_comm_s = _quantile([e["comm_s"] for e in steps], QUIET_QUANTILE)
    network_s = quiet_comm_s - service_s - (up_bytes + 4 * largest) / bytes_per_s
    sim = {"compute_ms": round(compute_s * 1e3, 6), "compute_jitter": round(jitter, 4), "speedup": 1.0,
           "request_us": round(max(0.0, service_s - apply_s) * 1e6, 3),
           "latency_us": round(max(0.0, network_s / 2) * 1e6, 3)}
    evidence = {"worker_steps": len(steps), "shards": shards, "workers": cfg.cluster.workers,
                "compute_ms_median": round(statistics.median(computes) * 1e3, 6),
                "compute_ms_p10_p90": [round(_quantile(computes, q) * 1e3, 6) for q in (SPREAD_Q, 1 - SPREAD_Q)],
                "compute_ms_sample_mean": round(statistics.fmean(computes) * 1e3, 6),
                "compute_sample_cv": round(statistics.pstdev(computes) / statistics.fmean(computes), 4),
                "service_us_mean": round(service_s * 1e6, 3),
                "comm_ms_quiet": round(quiet_comm_s * 1e3, 6),
                "comm_ms_median": round(statistics.median(e["comm_s"] for e in steps) * 1e3, 6),
                "push_bytes_per_shard": round(up_bytes), "reply_bytes_per_shard": 4 * largest,
                "kept": {"bandwidth_gbps": cfg.sim.bandwidth_gbps, "apply_gbytes_per_s": cfg.sim.apply_gbytes_per_s}}
    return Calibration(sim, evidence)
