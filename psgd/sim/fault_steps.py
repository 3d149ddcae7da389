"""What a kill and a restart do to the virtual cluster's workers and shards, without
time (the executor's part of psgd.sim.faults).

A restarted worker is a new process: its loader starts from the top, its encoder and
step count from zero, and it joins every shard again (`join`: the shard's own
register, which gives the clock it continues from and the last seq the shard has
from its rank). A restarted shard is rebuilt by the real shard's checkpoint rules
(servers.checkpoint: `shard_state_dict` at the kill, `load_shard_state` into a
fresh ShardState): the real shard writes every applied push to its log before it
acknowledges it and replays the log on restart, so it comes back with every update
it applied; its parked pulls and its connections are gone. Without checkpoints
(checkpoint.enabled false) it starts again from the model's initial parameters.
"""
from __future__ import annotations

from typing import Optional

from psgd.servers.checkpoint import load_shard_state, shard_state_dict
from psgd.servers.service import ShardService
from psgd.servers.state import ShardState

__all__ = ["FaultSteps"]


class FaultSteps:
    """Handed the executor whose workers and shards it kills and restarts."""

    def __init__(self, ex):
        self.ex = ex

    def restart_worker(self, rank: int) -> None:
        """Worker `rank`'s process starts again; it joins the shards with `join`."""
        ex = self.ex
        for read in ex.workers[rank].reads:  # the dead process's reads are over
            read.done = True
        ex.workers[rank] = ex.new_worker(rank)

    def join(self, rank: int, s: int, now: float) -> tuple:
        """Worker `rank` registers with shard s: its welcome (a Reply: the shard's parameters
        and the clock it continues from) and the replies to parked pulls its joining released."""
        joined = self.ex.services[s].register(rank, now)
        w = self.ex.workers[rank]
        w.joined(joined.last_seq)
        w.adopt([joined.clock])
        if w.shard_cursors:  # a streaming worker's own per-shard seq and clock
            w.shard_cursors[s].joined(joined.last_seq)
            w.shard_cursors[s].adopt([joined.clock])
        return self.ex.welcome(s, rank, joined.clock), self.ex.replies(s, joined)

    def snapshot_shard(self, s: int) -> Optional[dict]:
        """Shard s's durable state at a kill: what its snapshot and push log restore
        (None with checkpoint.enabled false: the real shard then keeps nothing)."""
        if not self.ex.cfg.checkpoint.enabled:
            return None
        return shard_state_dict(self.ex.shards[s], self.ex.layout.fingerprint)

    def restart_shard(self, s: int, snapshot: Optional[dict], now: float) -> None:
        """Shard s's process starts again from `snapshot` (None: from the model's initial
        parameters, as a real shard without checkpoints does), with no parked pull."""
        ex = self.ex
        state = ShardState(ex.cfg, s, ex.initial[s] if snapshot is None else snapshot["params"])
        if snapshot is not None:
            load_shard_state(state, snapshot, ex.layout.fingerprint, now)
        ex.shards[s] = state
        ex.services[s] = ShardService(state)
        ex.restart_replies(s)  # a new process encodes its replies afresh (its versions may repeat)

    def replies_of(self, s: int, served) -> list:
        """The replies shard s sends for what a request released (`Served.answers`)."""
        return self.ex.replies(s, served)
