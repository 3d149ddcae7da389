"""`psgd explain RUN_DIR`: where a real or simulated run's time went, read from what it recorded.

Per worker, from its `step` events (t is the step's end; step_s its length;
comm_s the push to parameters in hand): its own time (step_s - comm_s: the
forward and backward, loading the batch, an emulated slowdown), the pulls that
stayed parked on the shards (each step's `wait_s`: the longest any shard held
that step's pull, as the worker and the simulator record it; a run recorded
before steps carried it falls back on each shard's `waits.held_s` total in
`server_stats`, at the shard that held the worker longest), the rest of
the round trips (transfers, the shards' service and queues), of which its
encode and reply decode (its `done` event), and what its span leaves over
(start-up, restarts). Per shard: its busy share (`busy_s` over the time it
reported it) and the pulls it parked. Who the others waited on: the waits each
rank's pushes ended (`waits.waited_on_s`), and the rank whose push of a clock
arrived last. The same fields come from a real and a simulated run.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from psgd.config import ConfigError, Mode, Role, load_config
from psgd.core.histogram import Histogram
from psgd.runtime.event_names import Event
from psgd.runtime.events import read_events

__all__ = ["WorkerTime", "ShardLoad", "Breakdown", "STEP_WAITS", "SHARD_WAITS", "breakdown", "run_clock", "run_summary", "run_events", "worker_steps",
           "last_pushers", "release_spreads_s", "shard_busy_per_clock_s"]


STEP_WAITS = "step events (wait_s)"
SHARD_WAITS = "server_stats waits (held_s: the run's steps carry no wait_s)"


@dataclass(frozen=True)
class WorkerTime:
    rank: int
    steps: int
    span_s: float      # its first step's start to its last step's end
    compute_s: float   # its own time per step, summed (step_s - comm_s)
    wait_s: float      # its pulls parked on the shards (a barrier or a bound): its steps' wait_s, summed
    transfer_s: float  # the rest of its round trips: encoding, transfers, the shards' queues and service
    codec_s: float     # of transfer_s: encoding its pushes and decoding the replies
    other_s: float     # the span less the above: start-up, gaps, restarts

    def share(self, seconds: float) -> float:
        return seconds / self.span_s if self.span_s > 0 else 0.0


@dataclass(frozen=True)
class ShardLoad:
    shard: int
    busy_s: Optional[float]  # None: the run's shards recorded no service time
    reported_s: float        # the time of its last stats
    pulls_deferred: int

    @property
    def busy_share(self) -> Optional[float]:
        return None if self.busy_s is None or self.reported_s <= 0 else self.busy_s / self.reported_s


@dataclass(frozen=True)
class Breakdown:
    run_dir: str
    clock: str                      # "wall" (a real run) or "simulated"
    mode: Mode
    staleness: int
    backup_workers: int
    workers: list[WorkerTime]
    shards: list[ShardLoad]
    waited_on_s: list[float]        # rank -> others' parked time its requests ended (the shards', summed)
    last_at_clock: dict[int, int]   # rank -> clocks at which its push arrived last (clocks every rank reached)
    clocks_compared: int
    staleness_p95: Optional[float]
    staleness_max: Optional[int]
    wall_time_s: Optional[float]
    time_to_target_s: Optional[float]
    restarts: dict[str, int] = field(default_factory=dict)  # "role index" -> restarts by the launcher
    wait_source: str = STEP_WAITS   # where the workers' wait_s came from (STEP_WAITS, or SHARD_WAITS for older runs)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["mode"] = self.mode.value
        out["shards"] = [{**asdict(s), "busy_share": s.busy_share} for s in self.shards]
        return out


def run_events(run_dir: Path) -> list[dict]:
    """The run's events; ConfigError (one line) for a directory that is no run."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError("run_dir", f"{run_dir} is not a run directory (no config.yaml)")
    events = read_events(run_dir / "metrics.jsonl")  # ValueError for a damaged line
    return [e for e in events if isinstance(e, dict)]


def worker_steps(events: list[dict]) -> list[dict]:
    """The training steps of the workers (or of the all-reduce ranks)."""
    return [e for e in events if e.get("event") == Event.STEP and e.get("role") in (Role.WORKER, Role.ALLREDUCE)
            and all(isinstance(e.get(k), (int, float)) for k in ("t", "rank", "clock", "step_s", "comm_s"))]


def _last_stats(events: list[dict]) -> dict[int, dict]:
    """Each shard's latest server_stats (its counters are cumulative)."""
    last: dict[int, dict] = {}
    for e in events:
        if e.get("event") == Event.SERVER_STATS and e.get("role") == Role.SERVER and isinstance(e.get("index"), int):
            if e["index"] not in last or e.get("t", 0) >= last[e["index"]].get("t", 0):
                last[e["index"]] = e
    return last


def _rank_list(stats: dict, key: str, workers: int) -> list[float]:
    values = (stats.get("waits") or {}).get(key) or []
    return [float(values[r]) if r < len(values) else 0.0 for r in range(workers)]


def _by_clock(steps: list[dict], ranks: int) -> list[list[dict]]:
    """The steps of each clock that every rank reached."""
    by_clock: dict[int, list[dict]] = defaultdict(list)
    for s in steps:
        by_clock[s["clock"]].append(s)
    return [mine for mine in by_clock.values() if len({s["rank"] for s in mine}) == ranks]


def last_pushers(steps: list[dict], ranks: int) -> tuple[dict[int, int], int]:
    """(rank -> clocks at which its push left last, clocks counted): only clocks every rank reached."""
    full = _by_clock(steps, ranks)
    return dict(Counter(max(full_clock, key=lambda s: s["t"] - s["comm_s"])["rank"] for full_clock in full)), len(full)


def release_spreads_s(steps: list[dict], ranks: int) -> list[float]:
    """Per clock every rank reached, from the first rank's step end to the last one's (the
    parameters of that clock in every worker's hands). Under BSP a clock's replies leave
    the shard together: a wide spread is the workers taking turns on the cores, or the
    shard sending one reply after another, not the network."""
    return [max(s["t"] for s in mine) - min(s["t"] for s in mine) for mine in _by_clock(steps, ranks)]


def shard_busy_per_clock_s(events: list[dict]) -> Optional[float]:
    """The shards' service (busy_s, summed over shards) per clock (None: no clock or no busy_s)."""
    stats = _last_stats(events)
    clocks = max((s["clock"] for s in worker_steps(events)), default=0)
    busy = [s["busy_s"] for s in stats.values() if isinstance(s.get("busy_s"), (int, float))]
    return sum(busy) / clocks if clocks and busy else None


def breakdown(run_dir: Path) -> Breakdown:
    """Raises ConfigError for a run with nothing to explain (no worker steps: an
    all-reduce run explains its steps too, without shards)."""
    run_dir = Path(run_dir)
    events = run_events(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    steps = worker_steps(events)
    if not steps:
        raise ConfigError("metrics.jsonl", "no worker step recorded: nothing to explain")
    summary = run_summary(run_dir)
    workers = cfg.cluster.workers
    stats = _last_stats(events)
    held = [_rank_list(s, "held_s", workers) for s in stats.values()]
    per_step = any(isinstance(s.get("wait_s"), (int, float)) for s in steps)
    dones = {e.get("rank"): e for e in events if e.get("event") == Event.DONE and e.get("role") == Role.WORKER}
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for s in steps:
        by_rank[s["rank"]].append(s)
    times = []
    for rank, mine in sorted(by_rank.items()):
        comm = sum(s["comm_s"] for s in mine)
        wait = min(comm, sum(float(s.get("wait_s") or 0.0) for s in mine) if per_step
                   else max((h[rank] for h in held if rank < len(h)), default=0.0))
        done = dones.get(rank, {})
        codec = sum(float(done.get(k) or 0.0) for k in ("encode_s", "reply_decode_s"))
        span = max(s["t"] for s in mine) - min(s["t"] - s["step_s"] for s in mine)
        compute = sum(max(0.0, s["step_s"] - s["comm_s"]) for s in mine)
        times.append(WorkerTime(rank, len(mine), span, compute, wait, comm - wait, min(codec, comm - wait),
                                max(0.0, span - compute - comm)))
    shards = [ShardLoad(i, float(s["busy_s"]) if isinstance(s.get("busy_s"), (int, float)) else None,
                        float(s.get("t", 0.0)), int((s.get("counters") or {}).get("pulls_deferred", 0)))
              for i, s in sorted(stats.items())]
    waited_on = [sum(col) for col in zip(*(_rank_list(s, "waited_on_s", workers) for s in stats.values()))] \
        if stats else [0.0] * workers
    last, compared = last_pushers(steps, len(times))
    hist = Histogram()
    for s in stats.values():
        hist.merge(s.get("staleness_hist") or {})
    restarts = Counter(f"{e.get('process')} {e.get('process_index')}" for e in events
                       if e.get("event") == Event.RESTART)
    return Breakdown(str(run_dir), run_clock(run_dir),
                     cfg.consistency.mode, int(cfg.consistency.staleness) if str(cfg.consistency.staleness).isdigit()
                     else 0, cfg.consistency.backup_workers, times, shards, waited_on, last, compared,
                     hist.quantile(0.95) if hist.total else None, hist.max if hist.total else None,
                     summary.get("wall_time_s"), summary.get("time_to_target_s"), dict(restarts),
                     STEP_WAITS if per_step else SHARD_WAITS)


def run_clock(run_dir: Path) -> str:
    """"simulated" for a run of the virtual cluster, else "wall"."""
    return "simulated" if run_summary(Path(run_dir)).get("clock") == "simulated" else "wall"


def run_summary(run_dir: Path) -> dict:
    try:
        found = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}  # a run still going, or killed: its events still explain it
    return found if isinstance(found, dict) else {}
