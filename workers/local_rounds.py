"""The worker side of local updates: H steps of the worker's own optimizer, then
one push of the change in its parameters (start - end), whose reply starts the
next round from the servers' parameters.

The delta leaves through the same buffers, codecs and exactly-once rule as a
gradient does (psgd.workers.client); only its meaning differs.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from psgd.workers.model_sync import ModelSync

__all__ = ["LocalRounds"]


class LocalRounds:
    def __init__(self, steps: int, sync: ModelSync, inner: torch.optim.Optimizer):
        self.steps = steps
        self.sync = sync
        self.inner = inner
        self.taken = 0          # inner steps in the round under way
        self.rounds = 0         # rounds pushed by this process
        self.start: list[torch.Tensor] = []
        self.begin()

    def begin(self) -> None:
        """A round starts from the parameters the model holds now (just pulled)."""
        self.start = self.sync.flat_params(out=self.start or None)
        self.taken = 0

    def step(self) -> bool:
        """One inner step; True when the round is complete and its delta is due."""
        self.inner.step()
        self.taken += 1
        return self.taken >= self.steps

    def delta(self) -> list[torch.Tensor]:
        """start - now, one flat float32 host tensor per shard (reused buffers)."""
        self.rounds += 1
        return self.sync.deltas_from(self.start)

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "taken": self.taken,
                "start": [t.detach().cpu().clone() for t in self.start]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume a round: the inner optimizer's state, the steps taken and where the round began."""
        self.inner.load_state_dict(state["inner"])
        self.taken = int(state["taken"])
        for dst, src in zip(self.start, state["start"]):
            dst.copy_(src)
