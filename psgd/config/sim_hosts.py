"""`sim.hosts` and `sim.placement`: the machines of the virtual cluster and where each role runs.

With `hosts` empty (the default) the time model has no hosts: every worker and
shard has a link of its own and no CPU is charged but the shards' service, as
before hosts existed (the same runs, bit for bit). With hosts, every CPU action
is charged on its host's cores (psgd.sim.hosts), its costs from `sim.host_profile`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from psgd.config.loader import check as _check

__all__ = ["HostKind", "Placement", "COLOCATED"]

COLOCATED = "colocated"


@dataclass(frozen=True)
class HostKind:
    count: int = 1     # hosts of this kind
    # CPU cores of each; every CPU action of a role on the host (a worker's loop, encode and decode, a
    # shard's service, the evaluator) takes one core for its duration (sim.sharing says in what order).
    cores: int = 2
    # Accelerators of each: a worker on an accelerator computes there and its host core only launches
    # (ops x launch cost); 0: workers compute on the cores (unless workers.device_ms states a device time).
    accelerators: int = 0
    nic_gbps: Optional[float] = None      # the host's one NIC, shared by every role on it; null: sim.bandwidth_gbps
    nic_latency_us: Optional[float] = None  # its one-way latency; null: sim.latency_us

    def __post_init__(self):
        _check(1 <= self.count <= 100_000, "count", f"must be in [1, 100000], got {self.count}")
        _check(1 <= self.cores <= 4096, "cores", f"must be in [1, 4096], got {self.cores}")
        _check(0 <= self.accelerators <= 1024, "accelerators", f"must be in [0, 1024], got {self.accelerators}")
        _check(self.nic_gbps is None or self.nic_gbps > 0, "nic_gbps", f"must be > 0, got {self.nic_gbps}")
        _check(self.nic_latency_us is None or self.nic_latency_us >= 0, "nic_latency_us",
               f"must be >= 0, got {self.nic_latency_us}")


@dataclass(frozen=True)
class Placement:
    # The host kind (a key of sim.hosts) whose hosts run the workers; "": the first kind listed.
    workers: str = ""
    # Workers on each such host, filled in rank order (ranks 0..n-1 on the first host); null: the host's
    # accelerators where it has any, else the workers spread evenly (ceil(W / hosts)).
    workers_per_host: Optional[int] = None
    # colocated: shard s on worker host s mod H (as ps-lite and MXNet place servers); or a host kind
    # (a key of sim.hosts): shard s on host s mod that kind's count.
    shards: str = COLOCATED
    # colocated: on the first worker host; or a host kind: its first host.
    evaluator: str = COLOCATED

    def __post_init__(self):
        _check(self.workers_per_host is None or self.workers_per_host >= 1, "workers_per_host",
               f"must be >= 1 (or null), got {self.workers_per_host}")


# How a host's cores take their jobs (psgd.sim.cores): fcfs, first come first served over `cores`
# servers (a job waits for the earliest free core, in the order the simulation issues them); ps,
# processor sharing as Linux's scheduler approaches it (k runnable jobs each progress at
# min(1, cores / k) of a core; each role's jobs in turn); rr, in turns of Linux's default slice
# (0.75 ms x (1 + log2(min(cores, 8)))): a job shorter than a slice runs to its end, longer ones share.
Sharing = Literal["fcfs", "ps", "rr"]
