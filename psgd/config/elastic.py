"""Elastic workers: `cluster.workers` as a range {min, max}, and the rules that say
where a range cannot run. Ranks are 0..max-1 (each its own share of the data); the
first `min` start with the run and form its first quorum, the others join and leave
while it runs (psgd.orchestrate.elastic decides when)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from psgd.config.loader import check, int_max

__all__ = ["WorkerRange", "MAX_WORKERS", "elastic_refusal"]

MAX_WORKERS = 1_000_000  # worker ranks a run may have (the shards keep a clock per rank)


@dataclass(frozen=True)
class WorkerRange:
    """`cluster.workers` as a range: the run keeps at least `min` workers and may grow to
    `max` while it runs (psgd ctl RUN_DIR workers N locally; free worker slots on Ray)."""
    min: int = field(default=1, metadata=int_max(MAX_WORKERS))  # workers the run starts with and keeps
    # Ranks 0..max-1: the most workers that run at once (required).
    max: Optional[int] = field(default=None, metadata=int_max(MAX_WORKERS))

    def __post_init__(self):
        check(self.min >= 1, "min", f"must be >= 1, got {self.min}")
        check(self.max is not None, "max", "is required: the most workers that run at once")
        check(self.max >= self.min, "max", f"must be >= min ({self.min}), got {self.max}")


def elastic_refusal(cfg) -> Optional[tuple[str, str]]:
    """(key, reason) when a worker range cannot run with the rest of `cfg` (a psgd Config,
    which calls this as it is built); None when it can (or the worker count is fixed)."""
    span = cfg.cluster.worker_range
    if span is None:
        return None
    mode = cfg.consistency.mode
    if not mode.on_servers:
        return "cluster.workers", (f"a range needs parameter servers: {mode}'s world size is fixed when "
                                   "torch.distributed starts")
    if cfg.cluster.launcher == "sim":
        return "cluster.workers", "the virtual cluster (--on sim) runs a fixed worker count: give an int"
    if cfg.consistency.backup_workers and cfg.consistency.backup_workers >= span.min:
        return "consistency.backup_workers", f"must be < cluster.workers.min ({span.min})"
    if mode.synchronous and cfg.optimizer.lr_scaling == "linear":
        return "optimizer.lr_scaling", ("linear multiplies the rate by a fixed worker count, which a range "
                                        "changes while the run goes on: set the rate for the workers you expect")
    if cfg.local.enabled and mode.live:
        return "cluster.workers", (f"local updates under {mode} apply each delta at a share of the outer rate "
                                   "fixed by the worker count (1/workers): give an int, or use bsp, whose "
                                   "rounds average the deltas of the workers present")
    return None
