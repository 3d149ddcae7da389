"""A worker's place in the run: the clock (pushes completed, as the shards count
them) and the next push's sequence number, and how each moves. One rule for the
real client (psgd.workers.client.PSClient) and the simulator's workers
(psgd.sim.executor.VirtualWorker), so a simulated or replayed worker pushes the
seq and clock a real one would."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = ["PushCursor"]


@dataclass(kw_only=True)
class PushCursor:
    clock: int = 0  # pushes completed
    seq: int = 0    # the next push's sequence number (a resend reuses its push's)

    def pushed(self, seq: int, clock: int) -> None:
        """The push (seq, clock) completed. max, not += 1: a re-registration during
        the call may already have moved them on."""
        self.seq = max(self.seq, seq + 1)
        self.clock = max(self.clock, clock + 1)

    def adopt(self, shard_clocks: Iterable[int]) -> None:
        """Continue from the clock the shards assign (a rejoin, or a BSP straggler
        moved on). The lowest shard's view wins: pushing a clock one shard has
        already applied is dropped there as late, whereas a clock ahead of a
        BSP shard's step would be refused."""
        clocks = list(shard_clocks)
        if clocks:
            self.clock = max(self.clock, min(clocks))

    def joined(self, last_seq: int) -> None:
        """A shard that registered us last applied push `last_seq` (-1: none)."""
        self.seq = max(self.seq, last_seq + 1)
