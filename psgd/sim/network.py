"""The virtual cluster's network: each worker's and each shard's link, in both directions,
and when a message that leaves at one instant arrives (psgd.sim.time_model's streams).

Without hosts every role has its own links (the time model's worker_link and shard_link).
With hosts (sim.hosts) a role's links are its host's NIC, shared with the roles placed
beside it, and a message between roles of one host is a memory copy (psgd.sim.host_clock).
The engine (psgd.sim.engine) decides when a message leaves; this says when it arrives.
"""
from __future__ import annotations

from typing import Optional

from psgd.sim.host_clock import HostClock
from psgd.sim.messages import Push, Reply
from psgd.sim.time_model import Fifo, TimeModel, stream, stream_together

__all__ = ["Network"]


class Network:
    def __init__(self, shards: int, workers: int, time: TimeModel, hosts: Optional[HostClock]):
        self.time, self.hosts = time, hosts
        if hosts is None:
            self.shard_in = [Fifo() for _ in range(shards)]      # each shard's link, towards it
            self.shard_out = [Fifo() for _ in range(shards)]     # and from it
            self.worker_up = [Fifo() for _ in range(workers)]    # each worker's link, from it
            self.worker_down = [Fifo() for _ in range(workers)]  # and towards it
        else:
            model = hosts.model
            self.shard_in = [model.nic_down[h] for h in model.shard_host]
            self.shard_out = [model.nic_up[h] for h in model.shard_host]
            self.worker_up = [model.nic_up[h] for h in model.worker_host]
            self.worker_down = [model.nic_down[h] for h in model.worker_host]

    def push_arrivals(self, pushes: list[Push], t: float) -> list[float]:
        """One worker's pushes leaving together at `t`: when each reaches its shard."""
        rank = pushes[0].rank
        if self.hosts is not None:
            return self.hosts.push_arrivals(rank, [p.shard for p in pushes], [p.wire_bytes for p in pushes],
                                            self.worker_up[rank], [self.shard_in[p.shard] for p in pushes], t,
                                            stream_together)
        return stream_together(self.worker_up[rank], self.time.worker_link,
                               [(self.shard_in[p.shard], self.time.shard_link) for p in pushes], t,
                               [p.wire_bytes for p in pushes])

    def push_arrival(self, p: Push, t: float) -> float:
        """One push leaving alone at `t` (sent again, or released when its shard is back)."""
        if self.hosts is not None:
            return self.hosts.message(p.rank, p.shard, self.worker_up[p.rank], self.shard_in[p.shard], t,
                                      p.wire_bytes, to_shard=True)
        return stream(self.worker_up[p.rank], self.time.worker_link, self.shard_in[p.shard],
                      self.time.shard_link, t, p.wire_bytes)

    def reply_arrival(self, reply: Reply, t: float) -> float:
        """A reply leaving its shard at `t`: when it reaches its worker."""
        if self.hosts is not None:
            return self.hosts.message(reply.rank, reply.shard, self.shard_out[reply.shard],
                                      self.worker_down[reply.rank], t, reply.wire_bytes, to_shard=False)
        return self.downlink_arrival(reply.shard, reply.rank, t, reply.wire_bytes)

    def downlink_arrival(self, shard: int, rank: int, t: float, nbytes: int) -> float:
        """`nbytes` from shard to worker over their own links, leaving at `t` (hosts aside)."""
        return stream(self.shard_out[shard], self.time.shard_link, self.worker_down[rank],
                      self.time.worker_link, t, nbytes)
