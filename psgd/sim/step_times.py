"""Each simulated step's compute time: the base time (the model's on its device, or a
real run's recorded times), times the worker's persistent speed, times the step's jitter.

Recorded times (`sim.step_times_from`) are the `compute_s` of a run's worker
step events, per rank in the order they were written: simulated rank r takes
recorded rank (r mod R)'s, cycling when its record runs out.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Optional

from psgd.config import Config, ConfigError, Role
from psgd.core.step_time import StepVariability
from psgd.runtime.event_names import Event
from psgd.sim.time_model import TimeModel

__all__ = ["RecordedSteps", "StepTimes", "load_recorded_steps"]

KEY = "sim.step_times_from"


class RecordedSteps:
    """Per-rank compute seconds of a real run, and where they came from."""

    def __init__(self, by_rank: list[list[float]], source: Path, digest: str):
        self.by_rank, self.source, self.digest = by_rank, source, digest

    def seconds(self, rank: int, step: int) -> float:
        times = self.by_rank[rank % len(self.by_rank)]
        return times[step % len(times)]

    def describe(self) -> dict:
        return {"from": str(self.source), "sha256": self.digest, "ranks": len(self.by_rank),
                "steps": sum(len(t) for t in self.by_rank)}


def load_recorded_steps(path: str, base_dir: str) -> RecordedSteps:
    """The workers' per-step `compute_s` of a run directory (or a metrics.jsonl),
    relative to `base_dir`. Raises ConfigError naming sim.step_times_from."""
    import json
    source = Path(base_dir, path).expanduser()
    if source.is_dir():
        source = source / "metrics.jsonl"
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ConfigError(KEY, f"cannot read {source}: {exc.strerror or exc}") from None
    by_rank: dict[int, list[float]] = {}
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            e = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # a torn or garbled line: its step, if any, is simply not replayed
        if not isinstance(e, dict) or e.get("event") != Event.STEP or e.get("role") not in (Role.WORKER,
                                                                                               Role.ALLREDUCE):
            continue
        rank, compute_s = e.get("rank", e.get("index")), e.get("compute_s")
        if not isinstance(rank, int) or isinstance(compute_s, bool) or not isinstance(compute_s, (int, float)):
            raise ConfigError(KEY, f"{source} line {n}: a step event without an integer rank and a compute_s")
        if not (math.isfinite(compute_s) and compute_s >= 0):
            raise ConfigError(KEY, f"{source} line {n}: compute_s {compute_s} is not a finite time >= 0")
        by_rank.setdefault(rank, []).append(float(compute_s))
    if not by_rank:
        raise ConfigError(KEY, f"{source} records no worker step with a compute_s")
    if not any(t > 0 for times in by_rank.values() for t in times):
        raise ConfigError(KEY, f"{source}: every recorded compute_s is 0")
    return RecordedSteps([by_rank[r] for r in sorted(by_rank)], source.resolve(), hashlib.sha256(raw).hexdigest())


class StepTimes:
    """Compute seconds of (rank, step), a pure function of the config and seed."""

    def __init__(self, time: TimeModel, seed: int, speedup: float = 1.0, recorded: Optional[RecordedSteps] = None):
        self.base_s, self.speedup, self.recorded = time.compute_s, speedup, recorded
        self.variability = StepVariability(time.jitter_cv, time.spread_cv, seed)  # a real device's too

    @classmethod
    def for_run(cls, cfg: Config, time: TimeModel, recorded: Optional[RecordedSteps] = None) -> "StepTimes":
        return cls(time, cfg.run.seed, cfg.sim.speedup, recorded)

    def compute_s(self, rank: int, step: int) -> float:
        base = self.base_s if self.recorded is None else self.recorded.seconds(rank, step) / self.speedup
        return base * self.variability.factor(rank, step)
