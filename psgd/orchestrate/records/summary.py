"""summary.json: the figures of one run, computed from its metric events."""
from __future__ import annotations

from typing import Iterable, Optional

from psgd.config import Config
from psgd.config.modes import Role
from psgd.core.histogram import Histogram
from psgd.core.modes import behaviour_class
from psgd.core.target import METRICS, held_target_time, metric_series, run_target
from psgd.orchestrate.records.setting_history import setting_history
from psgd.orchestrate.states import RunStatus
from psgd.runtime.event_names import Event
from psgd.runtime.version import VERSION

__all__ = ["summarize", "time_to_target"]


def _bounded(cfg: Config) -> bool:
    """Does the run's mode bound its pulls by `consistency.staleness` (its class says)?"""
    return cfg.consistency.mode.on_servers and behaviour_class(cfg.consistency.mode).BOUNDED


def time_to_target(evals: list[dict], train) -> Optional[float]:
    """When the run reached its target and held it (psgd.core.target), or None."""
    target = run_target(train)
    if target is None:
        return None
    metric, value, rule = target
    times, values = metric_series(evals, metric)
    return held_target_time(times, values, value, METRICS[metric][1], rule)


def summarize(cfg: Config, events: Iterable[dict], wall_time_s: float, status: RunStatus = RunStatus.OK,
              restarts: int = 0, clock: str = "wall") -> dict:
    """`clock`: "wall" for real runs, "simulated" for the virtual cluster (psgd.sim),
    whose event times and `wall_time_s` are simulated seconds."""
    events = list(events)
    evals = sorted((e for e in events if e.get("event") == Event.EVAL), key=lambda e: e["t"])
    final_eval = next((e for e in reversed(evals) if e.get("final")), evals[-1] if evals else None)
    # Each shard's latest stats are cumulative; the allreduce workers report their own.
    latest: dict[tuple[str, int], dict] = {}
    for e in events:
        if e.get("event") == Event.SERVER_STATS:
            latest[(e["role"], e["index"])] = e
    staleness, gaps = Histogram(), Histogram()
    counters: dict[str, int] = {}
    for st in latest.values():
        staleness.merge(st.get("staleness_hist", {}))
        gaps.merge(st.get("clock_gap_hist", {}))
        for k, v in st.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + int(v)
    steps = [e for e in events if e.get("event") == Event.STEP]
    if not cfg.consistency.mode.on_servers:
        total_updates = max((e.get("clock", 0) for e in steps), default=0)
    else:
        # A model update touches every shard once, so one shard's version counts them.
        total_updates = max((int(st.get("version", 0)) for st in latest.values()), default=0)
    # Every rank that trains pushes (a worker) or contributes (an all-reduce rank) its gradient.
    done = [e for e in events if e.get("event") == Event.DONE and e.get("role") in (Role.WORKER, Role.ALLREDUCE)]
    wire_bytes = sum(int(e.get("bytes_sent", 0)) for e in done)
    fp32_bytes = sum(int(e.get("fp32_bytes", 0)) for e in done)
    pull_bytes = sum(int(e.get("pull_bytes", 0)) for e in done)
    pull_fp32_bytes = sum(int(e.get("pull_fp32_bytes", 0)) for e in done)
    losses = [e["loss"] for e in steps[-max(1, cfg.cluster.workers * 5):] if e.get("loss") is not None]
    span = cfg.cluster.worker_range
    final_setting, setting_changes = setting_history(cfg, events)
    return {
        "psgd_version": VERSION,  # the psgd that ran it (`psgd --version` prints the same)
        "mode": cfg.consistency.mode.value,
        "staleness": cfg.consistency.staleness if _bounded(cfg) else None,
        "servers": cfg.cluster.num_servers if cfg.consistency.mode.on_servers else 0,
        "workers": cfg.cluster.workers,
        "status": str(status),
        "clock": clock,
        "seed": cfg.run.seed,
        "wall_time_s": round(wall_time_s, 3),
        "total_updates": total_updates,
        "worker_steps": len(steps),
        "updates_per_s": round(total_updates / wall_time_s, 3) if wall_time_s > 0 else 0.0,
        "final_test_accuracy": final_eval["accuracy"] if final_eval else None,
        "final_test_loss": final_eval["test_loss"] if final_eval else None,
        "final_train_loss": sum(losses) / len(losses) if losses else None,
        "target_accuracy": cfg.train.target_accuracy,
        "time_to_target_s": time_to_target(evals, cfg.train),
        "staleness_mean": round(staleness.mean, 4),
        "staleness_max": staleness.max,
        "staleness_hist": staleness.as_dict(),
        "max_clock_gap": gaps.max,
        "clock_gap_hist": gaps.as_dict(),
        # Live changes (psgd ctl, the adaptive bound): `mode` and `staleness` above are the run's start;
        # the setting in force at the end (None: never changed) and each change, clock, key, old -> new.
        "final_setting": final_setting,
        "setting_changes": setting_changes,
        "rejected_updates": counters.get("rejected_nonfinite", 0) + counters.get("rejected_stale", 0),
        "late_dropped": counters.get("late_dropped", 0),
        "duplicates": counters.get("duplicates", 0),  # resent pushes, not applied again: the shard's name
        # Pushes some shard applied and another never received (a worker killed mid-send).
        "partial_pushes": counters.get("partial_pushes", 0),
        "bad_requests": counters.get("bad_requests", 0),
        "workers_timed_out": counters.get("workers_timed_out", 0),
        "restarts": restarts,
        # Elastic workers (cluster.workers: {min, max}): the range, and each worker that joined
        # or left the run while it trained, in order (none for a fixed count).
        "worker_range": None if span is None else {"min": span.min, "max": span.max},
        "membership_changes": [{k: e.get(k) for k in ("t", "rank", "change", "clock", "cause")}
                               for e in events if e.get("event") == Event.MEMBERSHIP],
        # Gradient payload bytes the workers pushed, and that over what fp32 would have sent.
        "wire_bytes_sent": wire_bytes,
        "compression_ratio": round(wire_bytes / fp32_bytes, 6) if fp32_bytes else None,
        # What one training example cost on the wire: local updates push once per round.
        "wire_bytes_per_example": round(wire_bytes / (len(steps) * cfg.task.batch_size), 3) if steps else None,
        # Parameter bytes the workers' pulls brought back, as encoded (wire.compression.replies), per
        # training example, and over what fp32 would have carried (registrations not counted).
        "pull_bytes_received": pull_bytes,
        "pull_bytes_per_example": round(pull_bytes / (len(steps) * cfg.task.batch_size), 3) if steps else None,
        "pull_compression_ratio": round(pull_bytes / pull_fp32_bytes, 6) if pull_fp32_bytes else None,
        # The most bytes one worker's push carried (streaming DiLoCo: one fragment's): the peak a sync needs.
        "peak_push_bytes": max((int(e["peak_push_bytes"]) for e in done if "peak_push_bytes" in e), default=None),
        # The codecs' own time: the workers encoding their pushes, the shards decoding them
        # (None where nobody measured it: the simulator's virtual processes do not).
        "codec_encode_s": round(sum(float(e["encode_s"]) for e in done if "encode_s" in e), 6)
        if any("encode_s" in e for e in done) else None,
        "codec_decode_s": round(counters["decode_us"] / 1e6, 6) if "decode_us" in counters else None,
        # The same for replies in a reply encoding: the shards encoding them, the workers decoding them.
        "codec_reply_encode_s": round(counters["reply_encode_us"] / 1e6, 6) if "reply_encode_us" in counters else None,
        "codec_reply_decode_s": round(sum(float(e["reply_decode_s"]) for e in done if "reply_decode_s" in e), 6)
        if "reply_encode_us" in counters else None,
        **(_quorum(counters) if cfg.consistency.quorum is not None else {}),
        # Each role's CPU while it trained (user + system, every thread; simulated: what the time model
        # charged its host's cores), summed over its processes; None where no process measured it.
        "role_cpu_s": _role_cpu(done, latest, "cpu_s"),
        "role_sys_s": _role_cpu(done, latest, "sys_s"),
    }


def _role_cpu(done: list[dict], latest: dict[tuple[str, int], dict], key: str) -> Optional[dict[str, float]]:
    out: dict[str, float] = {}
    for e in [*done, *(st for (role, _), st in latest.items() if role == Role.SERVER)]:
        if key in e:
            out[str(e["role"])] = round(out.get(str(e["role"]), 0.0) + float(e[key]), 4)
    return out or None


def _quorum(counters: dict[str, int]) -> dict:
    """Quorum merging, summed over the shards (each shard merges its part of a delta on its own)."""
    return {"quorum_carried": counters.get("quorum_carried", 0),  # deltas merged one or more rounds late
            "quorum_closed_by_grace": counters.get("quorum_closed_by_grace", 0)}  # merges a grace window ended
