"""Merge the per-process events of a multi-host run into metrics.jsonl and summary.json.

Each process of `psgd run` (or of per-role `psgd server/worker/evaluator
--run-dir DIR`) writes DIR/events/<role>-<index>.jsonl. On a shared
filesystem the job's last process calls `collect` itself; otherwise copy every
host's events/ into one directory and run `psgd collect DIR`.
"""
from __future__ import annotations

import json
from pathlib import Path

from psgd.config import Config, load_config
from psgd.config.modes import Role
from psgd.orchestrate.records.metrics_export import export_events
from psgd.orchestrate.records.summary import summarize
from psgd.orchestrate.states import RunStatus
from psgd.runtime.events import read_events
from psgd.runtime.files import atomic_write
from psgd.runtime.role import START_FILE

__all__ = ["collect", "expected_processes", "read_event_files"]


def read_event_files(run_dir: Path) -> list[dict]:
    """Every complete event of run_dir/events/*.jsonl, ordered by `t`."""
    events = [e for path in sorted((run_dir / "events").glob("*.jsonl")) for e in read_events(path)]
    events.sort(key=lambda e: e.get("t", 0.0))
    return events


def collect(run_dir: Path, cfg: Config | None = None, status: RunStatus = RunStatus.OK) -> dict:
    """Write run_dir/metrics.jsonl and summary.json; returns the summary.
    `cfg` defaults to run_dir/config.yaml. Wall time is the last worker event's `t`;
    `missing_events` lists the processes whose events file is not there."""
    run_dir = Path(run_dir)
    if cfg is None:
        cfg = load_config(run_dir / "config.yaml")
    events = read_event_files(run_dir)
    wall = max((e.get("t", 0.0) for e in events if e.get("role") in (Role.WORKER, Role.ALLREDUCE)), default=0.0)
    atomic_write(run_dir / "metrics.jsonl", "".join(json.dumps(e) + "\n" for e in events))
    export_events(run_dir, cfg, events, _start_time(run_dir))  # metrics.csv (+ TensorBoard)
    summary = summarize(cfg, events, wall, status=status)
    # Without a shared filesystem a host sees only its own processes' events: say whose are absent.
    summary["missing_events"] = [name for name in expected_processes(cfg)
                                 if not (run_dir / "events" / f"{name}.jsonl").exists()]
    atomic_write(run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


def _start_time(run_dir: Path):
    """The run's training start (wall clock), for TensorBoard's time axis."""
    try:
        return float(json.loads((run_dir / START_FILE).read_text())["t0"])
    except (OSError, ValueError, KeyError):
        return None


def expected_processes(cfg: Config) -> list[str]:
    """'<role>-<index>' of every process a parameter-server run has."""
    names = [f"server-{i}" for i in range(cfg.cluster.num_servers)]
    names += [f"worker-{r}" for r in range(cfg.cluster.starting_workers)]  # a range's others may never run
    return names + (["evaluator-0"] if cfg.eval.enabled else [])
