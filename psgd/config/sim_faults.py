"""The `sim.faults:` section: kills in the virtual cluster (psgd.sim.faults), with the
real launcher's restart rules (the `supervision:` keys) and the real shard's
checkpoint rules: a storm of planned kills (restarted), and kills of stated workers
at stated times (not restarted)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from psgd.config.loader import check as _check
from psgd.config.modes import Role

__all__ = ["FaultTarget", "SimFaults", "WorkerKill", "PROMOTE_S"]

# The real shard storm with cluster.replicas: 1 (quickstart, one kill every 5 s, 2 seeds, 2 cores
# at load 19-22): kill -> every worker registered with the promoted backup, median of 6 kills 0.40 s
# (0.33-0.51). Most of it is the workers' reconnection (every 100 ms, then further apart) and
# re-registering; the backup's own takeover (bind, the log's tail, a snapshot) is tens of ms.
PROMOTE_S = 0.4


class FaultTarget(str, Enum):
    WORKERS = "workers"
    SHARDS = "shards"

    @property
    def role(self) -> Role:
        """The role name a kill of this target hits in processes.json and the events."""
        return Role.WORKER if self is FaultTarget.WORKERS else Role.SERVER

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class WorkerKill:
    # Worker `rank` is killed at `at_s` simulated seconds of training, as the storm kills one,
    # and is not restarted: a lost worker. The shards drop it once it has been silent for
    # cluster.timeout_s, as a real shard times out a silent worker.
    rank: int = 0                # the worker that dies
    at_s: float = 0.0            # when, in simulated seconds of training

    def __post_init__(self):
        _check(self.rank >= 0, "rank", f"must be >= 0, got {self.rank}")
        _check(0 <= self.at_s < float("inf"), "at_s", f"must be finite seconds >= 0, got {self.at_s}")


@dataclass(frozen=True)
class SimFaults:
    # One kill every kill_every_s simulated seconds from kill_every_s on (0: none), the
    # target's processes in turn (0, 1, ..., 0, ...), planned as `psgd bench faults`
    # plans the real storm: no kill whose restart would not be back 5 s before
    # train.max_time_s. A killed process restarts after supervision.backoff_s (doubling,
    # reset after supervision.backoff_reset_s) plus restart_s, within supervision.max_restarts.
    kill_every_s: float = 0.0
    target: FaultTarget = FaultTarget.WORKERS  # whom the storm kills: workers or shards
    # Seconds a restart takes beyond the launcher's backoff: noticing the death, starting
    # the interpreter, imports, the model and data (a shard: its checkpoint), until it
    # is registered (a worker) or serving (a shard). On the committed real worker storm
    # (benchmarks/faults/workers) kill -> registered on every shard less the backoff
    # was 0.67 s (median of 55 kills; 0.49-0.94 s).
    restart_s: float = 0.67
    # With cluster.replicas: seconds from a primary's death until its backup serves the shard
    # (it binds the freed address, reads the log's tail, writes a snapshot, and the workers'
    # connections come back). Measured on the real shard storm with replicas 1 (PROMOTE_S).
    promote_s: float = PROMOTE_S
    # Workers killed at stated times and never restarted, each as {rank, at_s}; beside the
    # storm or without it (they need no kill_every_s, and work under local updates too).
    kills: list[WorkerKill] = field(default_factory=list)

    def __post_init__(self):
        _check(0 <= self.kill_every_s < float("inf"), "kill_every_s", f"must be >= 0 and finite, got {self.kill_every_s}")
        _check(0 <= self.restart_s < float("inf"), "restart_s", f"must be >= 0 and finite, got {self.restart_s}")
        _check(0 <= self.promote_s < float("inf"), "promote_s", f"must be >= 0 and finite, got {self.promote_s}")

    @property
    def storm(self) -> bool:
        """Planned kills with restarts (kill_every_s) are on."""
        return self.kill_every_s > 0

    @property
    def enabled(self) -> bool:
        """Any process dies: the failure model runs."""
        return self.storm or bool(self.kills)
