"""`psgd trace RUN_DIR`: a run's events as Chrome trace events (Perfetto, chrome://tracing).

The JSON object format (traceEvents, displayTimeUnit, otherData), times in
microseconds since training start, in the run's own clock: wall seconds for a
real run, simulated seconds for a simulated one, so the two lay side by side.
Tracks (pid: a process group, tid: a track in it):
- workers (one track per rank): a `compute` span (its own time: step_s -
  comm_s) then a `push+pull` span (the round trip, a parked pull's wait
  included) per step, with clock and clock gap as arguments; inside the round
  trip, a wait span (category `wait`) where the step's pull stayed parked on
  the shards (the step's `wait_s`: the longest any shard held it), named for
  the rule it waited on: `barrier wait` (bsp), `staleness-bound wait` (ssp),
  else `pull wait`; the rule in force at the step's clock (psgd ctl may switch
  it). Its length is measured on the shard; it is drawn at the round trip's
  end, where the release sends the reply (the reply's transfer is not split out);
- shards (one track per shard): `busy` (share of the interval served),
  `updates/s` and `pulls parked` counters from its stats, taken every second
  (a real shard) or at each evaluation (a simulated one);
- the evaluator: test accuracy and loss as counters, each evaluation an instant;
- the run: membership changes, restarts, timeouts, setting changes, leaves and
  errors as instant events.
Large runs are bounded: a time window (`since_s`, `until_s`) and, past
`max_steps` worker steps, every k-th step of each worker; `otherData` says which.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.bench.explain import run_clock, run_events, worker_steps
from psgd.config import Config, Mode, Role, load_config
from psgd.orchestrate.records.setting_history import SETTING_KEYS, setting_history
from psgd.runtime.event_names import Event

__all__ = ["TraceBounds", "trace", "MAX_STEPS", "WORKERS_PID", "SHARDS_PID", "EVALUATOR_PID", "RUN_PID", "WAIT",
           "wait_name"]

MAX_STEPS = 100_000  # worker steps kept in a trace before it samples (each step is two or three spans)
WORKERS_PID, SHARDS_PID, EVALUATOR_PID, RUN_PID = 1, 2, 3, 4
WAIT = "wait"  # the category (`cat`) of every wait span, whatever the rule it waited on
_WAIT_NAMES = {Mode.BSP: "barrier wait", Mode.SSP: "staleness-bound wait"}
_INSTANTS = (Event.MEMBERSHIP, Event.RESTART, Event.WORKER_TIMED_OUT, Event.SETTING_CHANGE, Event.LEAVE,
             Event.NODE_LOST, Event.RESUMED, Event.ERROR, Event.TARGET_REACHED)


@dataclass(frozen=True)
class TraceBounds:
    since_s: float = 0.0
    until_s: float = math.inf
    max_steps: int = MAX_STEPS

    def __post_init__(self):
        if not (0 <= self.since_s < self.until_s):
            raise ValueError(f"trace window: need 0 <= since < until, got {self.since_s}, {self.until_s}")
        if self.max_steps < 1:
            raise ValueError(f"trace: max_steps must be >= 1, got {self.max_steps}")

    def holds(self, t: float) -> bool:
        return self.since_s <= t <= self.until_s


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _meta(pid: int, tid: Optional[int], name: str) -> dict:
    kind, args = ("process_name", {"name": name}) if tid is None else ("thread_name", {"name": name})
    return {"name": kind, "ph": "M", "pid": pid, "tid": 0 if tid is None else tid, "ts": 0, "args": args}


def wait_name(mode: str) -> str:
    """The name of a wait span under consistency mode `mode` (a Mode or its value)."""
    return _WAIT_NAMES.get(mode, "pull wait")


def _mode_at(cfg: Config, events: list[dict]):
    """clock -> the consistency mode in force at it (the config's, then each live change's from its clock)."""
    _, changes = setting_history(cfg, events)
    switches = [(c["clock"], str(c["new"])) for c in changes if c["key"] == SETTING_KEYS["mode"]]

    def at(clock: int) -> str:
        mode = cfg.consistency.mode.value
        for since, new in switches:
            if clock >= since:
                mode = new
        return mode
    return at


def _worker_spans(steps: list[dict], bounds: TraceBounds, mode_at) -> tuple[list[dict], str]:
    kept = [s for s in steps if bounds.holds(s["t"]) and bounds.holds(s["t"] - s["step_s"])]
    every = max(1, math.ceil(len(kept) / bounds.max_steps))
    note = "every step in the window" if every == 1 else \
        f"every {every}th step of each worker ({math.ceil(len(kept) / every)} of {len(kept)} in the window)"
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for s in kept:
        by_rank[s["rank"]].append(s)
    out: list[dict] = []
    for rank, steps_of_rank in sorted(by_rank.items()):
        mine = sorted(steps_of_rank, key=lambda s: s["t"])[::every]
        end = -math.inf
        for s in mine:
            # A step's start comes from its own timer, its end from the event log's: never before the last end.
            start = max(end, _us(s["t"] - s["step_s"]))
            pushed = max(start, _us(s["t"] - s["comm_s"]))
            end = max(pushed, _us(s["t"]))
            args = {"clock": s["clock"], "gap": s.get("gap")}
            out.append({"name": "compute", "ph": "X", "pid": WORKERS_PID, "tid": rank, "ts": start,
                        "dur": round(pushed - start, 3), "args": args})
            out.append({"name": "push+pull", "ph": "X", "pid": WORKERS_PID, "tid": rank, "ts": pushed,
                        "dur": round(end - pushed, 3), "args": args})
            wait = s.get("wait_s")
            if isinstance(wait, (int, float)) and wait > 0:  # nested in the round trip, ending with it
                waited = max(pushed, end - _us(wait))
                mode = mode_at(s["clock"])
                out.append({"name": wait_name(mode), "cat": WAIT, "ph": "X", "pid": WORKERS_PID, "tid": rank,
                            "ts": round(waited, 3), "dur": round(end - waited, 3),
                            "args": {**args, "wait_s": wait, "mode": mode}})
    return out, note


def _shard_counters(events: list[dict], bounds: TraceBounds) -> list[dict]:
    out: list[dict] = []
    before: dict[int, dict] = {}
    stats = sorted((e for e in events if e.get("event") == Event.SERVER_STATS and e.get("role") == Role.SERVER
                    and isinstance(e.get("index"), int) and isinstance(e.get("t"), (int, float))),
                   key=lambda e: (e["index"], e["t"]))
    for e in stats:
        shard, prev = e["index"], before.get(e["index"])
        before[shard] = e
        if prev is None or e["t"] <= prev["t"] or not bounds.holds(e["t"]):
            continue
        span = e["t"] - prev["t"]
        values = {"updates/s": (e.get("version", 0) - prev.get("version", 0)) / span,
                  "pulls parked": (e.get("counters") or {}).get("pulls_deferred", 0)
                  - (prev.get("counters") or {}).get("pulls_deferred", 0)}
        if isinstance(e.get("busy_s"), (int, float)) and isinstance(prev.get("busy_s"), (int, float)):
            values["busy"] = round(100 * (e["busy_s"] - prev["busy_s"]) / span, 3)
        for name, value in values.items():
            out.append({"name": f"shard {shard} {name}", "ph": "C", "pid": SHARDS_PID, "tid": shard,
                        "ts": _us(e["t"]), "args": {name: round(value, 6)}})
    return out


def _evaluations(events: list[dict], bounds: TraceBounds) -> list[dict]:
    out: list[dict] = []
    for e in sorted((e for e in events if e.get("event") == Event.EVAL and isinstance(e.get("t"), (int, float))
                     and bounds.holds(e["t"])), key=lambda e: e["t"]):
        scores = {k: e[k] for k in ("accuracy", "test_loss") if isinstance(e.get(k), (int, float))}
        out.append({"name": "eval", "ph": "i", "s": "t", "pid": EVALUATOR_PID, "tid": 0, "ts": _us(e["t"]),
                    "args": {**scores, "updates": e.get("updates")}})
        for name, value in scores.items():
            out.append({"name": name, "ph": "C", "pid": EVALUATOR_PID, "tid": 0, "ts": _us(e["t"]),
                        "args": {name: value}})
    return out


def _instants(events: list[dict], bounds: TraceBounds) -> list[dict]:
    out = []
    for e in sorted((e for e in events if e.get("event") in _INSTANTS and isinstance(e.get("t"), (int, float))
                     and bounds.holds(e["t"])), key=lambda e: e["t"]):
        args = {k: v for k, v in e.items() if k not in ("t", "event") and isinstance(v, (str, int, float, bool))}
        out.append({"name": str(e["event"]), "ph": "i", "s": "g", "pid": RUN_PID, "tid": 0, "ts": _us(e["t"]),
                    "args": args})
    return out


def trace(run_dir: Path, bounds: TraceBounds = TraceBounds()) -> dict:
    """The trace of a run directory (real or simulated) as a JSON-ready dict.
    Raises ConfigError for a directory that is no run."""
    events = run_events(Path(run_dir))
    mode_at = _mode_at(load_config(Path(run_dir) / "config.yaml"), events)
    spans, note = _worker_spans(worker_steps(events), bounds, mode_at)
    shards = _shard_counters(events, bounds)
    body = spans + shards + _evaluations(events, bounds) + _instants(events, bounds)
    meta = [_meta(WORKERS_PID, None, "workers"), _meta(SHARDS_PID, None, "shards"),
            _meta(EVALUATOR_PID, None, "evaluator"), _meta(RUN_PID, None, "run")]
    meta += [_meta(WORKERS_PID, r, f"worker {r}") for r in sorted({e["tid"] for e in spans})]
    meta += [_meta(SHARDS_PID, s, f"shard {s}") for s in sorted({e["tid"] for e in shards})]
    window = f"{bounds.since_s:g} s to " + ("the end" if math.isinf(bounds.until_s) else f"{bounds.until_s:g} s")
    return {"traceEvents": meta + body, "displayTimeUnit": "ms",
            "otherData": {"run_dir": str(run_dir), "clock": run_clock(Path(run_dir)),
                          "window": window, "steps": note}}

