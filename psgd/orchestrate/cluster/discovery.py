"""Server discovery and job bookkeeping through torch.distributed's TCPStore.

Servers publish "host:port" under `server/<i>`; workers and the evaluator
block on those keys, so no address list is written by hand. The same store
holds a start barrier (one training clock for every host) and the counters
that end a job in order: workers finish, the evaluator takes its final
measurement, then the servers stop. Keys are namespaced by the launcher's job
id, so a restarted torchrun job never reads a previous attempt's addresses.
"""
from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist

from psgd.runtime.cluster_env import ClusterEnv

__all__ = ["JobStore", "open_store"]

WORKERS_DONE = "workers_done"
EVAL_DONE = "eval_done"
EXITED = "exited"
ARRIVED = "arrived"
T0 = "t0"
TARGET_REACHED = "target_reached"  # the evaluator saw train.target_accuracy (stop_at_target)
FAILED = "failed"      # set by a rank whose role ended badly: the others stop


def open_store(launch: ClusterEnv, timeout_s: float) -> "JobStore":
    """Connect to (or, on rank 0 without a torchrun agent store, host) the job's
    TCPStore at the launcher's master address. Blocks until connected."""
    host_here = launch.rank == 0 and not launch.agent_store
    store = dist.TCPStore(launch.master_addr, launch.master_port, world_size=None, is_master=host_here,
                          timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    return JobStore(dist.PrefixStore(f"psgd/{launch.job_id}/", store), store)


class JobStore:
    """Typed operations on the job's keys. Every call blocks on the network;
    the underlying TCPStore client may be used from several threads."""

    def __init__(self, store: dist.Store, raw: dist.Store):
        self.store = store
        self._raw = raw  # keeps a hosted store's server alive as long as this object

    def publish_server(self, shard: int, address: str) -> None:
        self.store.set(f"server/{shard}", address)

    def server_addresses(self, num_servers: int) -> list[str]:
        """Blocks until every shard has published its address (store timeout)."""
        keys = [f"server/{i}" for i in range(num_servers)]
        self.store.wait(keys)
        return [self.store.get(k).decode() for k in keys]

    def start_barrier(self, world_size: int, poll_s: float = 0.05) -> float | None:
        """Blocks until every rank arrived; returns the common start time t0
        (wall clock of the last rank to arrive), or None if a rank failed first."""
        if self.store.add(ARRIVED, 1) == world_size:
            self.store.set(T0, repr(time.time()))
        while not self.store.check([T0]):
            if self.store.check([FAILED]):
                return None
            time.sleep(poll_s)
        return float(self.store.get(T0).decode())

    def count(self, key: str, add: int = 0) -> int:
        return self.store.add(key, add)

    def mark(self, key: str, value: str = "1") -> None:
        self.store.set(key, value)

    def is_set(self, key: str) -> bool:
        return self.store.check([key])

    def get(self, key: str) -> str:
        return self.store.get(key).decode()
