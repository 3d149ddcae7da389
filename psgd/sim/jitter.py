"""The seeded order of simultaneous sends on the virtual cluster. The step-time
draws themselves are psgd.core.step_time's (real workers share them)."""
from __future__ import annotations

import numpy as np

from psgd.core.step_time import BLOCK

__all__ = ["SendOrder"]

_ORDER_STREAM = 0x0DE5


class SendOrder:
    """The order of sends that leave at the same instant: each (rank, step) draws a
    uniform priority; among equal times the lower one goes first. Without it,
    workers in lock-step would queue in rank order at every clock, and BSP's
    backup workers would drop the same ranks forever."""

    def __init__(self, seed: int, stream: int = 0):
        """`stream`: independent orders from one seed (sends, a shard's picks)."""
        self.seed, self.stream = int(seed), _ORDER_STREAM + int(stream)
        self._blocks: dict[int, tuple[int, np.ndarray]] = {}

    def priority(self, rank: int, step: int) -> float:
        block, i = divmod(step, BLOCK)
        held = self._blocks.get(rank)
        if held is None or held[0] != block:
            held = (block, np.random.default_rng([self.seed, int(rank), block, self.stream]).random(BLOCK))
            self._blocks[rank] = held
        return float(held[1][i])

    def ranks(self, ranks, step: int) -> list[int]:
        """`ranks` that all send their step `step` at one instant, in the order they leave."""
        return sorted(ranks, key=lambda r: (self.priority(r, step), r))
