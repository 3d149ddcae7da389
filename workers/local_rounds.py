"""The worker side of local updates: H steps of the worker's own optimizer, then
one push of the change in its parameters (start - end), whose reply starts the
next round from the servers' parameters.

The delta leaves through the same buffers, codecs and exactly-once rule as a
gradient does (psgd.workers.client); only its meaning differs.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

import torch

from psgd.core.local_methods import Codecs, LocalMethod
from psgd.core.local_methods.pace import smoothed
from psgd.workers.model_sync import ModelSync

__all__ = ["LocalRounds"]


class LocalRounds:
    """`method` (psgd.core.local_methods) says how many steps each round takes;
    `fastest_step_s()`: the fastest worker's time per step as the shards last
    reported it, which a paced method (DyLU) follows; `codecs`: the run's, which the
    method's `outgoing` may apply to each delta (psgd.wire.codecs.registry.DeltaCodecs)."""

    def __init__(self, method: LocalMethod, sync: ModelSync, inner: torch.optim.Optimizer,
                 fastest_step_s: Callable[[], float], clock: Callable[[], float] = time.monotonic,
                 codecs: Optional[Codecs] = None):
        """`clock`: seconds, for this worker's own pace (the virtual cluster passes its simulated clock)."""
        self.method = method
        self.codecs = codecs
        self.steps = method.local.steps  # nominal steps per round
        self.sync = sync
        self.inner = inner
        self.fastest_step_s = fastest_step_s
        self.taken = 0          # inner steps in the round under way
        self.rounds = 0         # rounds pushed by this process
        self.steps_total = 0    # inner steps in the rounds pushed
        self.round_steps = self.steps  # this round's length
        self.own_step_s = 0.0   # this worker's time per step, smoothed over its rounds
        self.start: list[torch.Tensor] = []
        self._clock = clock
        self._began = clock()
        self.begin()

    def begin(self) -> None:
        """A round starts from the parameters the model holds now (just pulled)."""
        self.start = self.sync.flat_params(out=self.start or None)
        self.taken = 0
        self._began = self._clock()
        if self.method.paced:
            self.round_steps = self.method.round_steps(self.own_step_s, self.fastest_step_s())

    def steps_taken(self, pushed: int) -> int:
        """Training steps of a worker that has completed `pushed` pushes (its seq):
        the inner steps of the rounds it pushed and of the round under way, plus the
        rounds an earlier process of its rank pushed (a restart) at their nominal
        length. By seq, not by clock: the clock moves past rounds a worker never
        trained when the shards merged without it (a quorum's latecomer, BSP's
        backup workers)."""
        return max(0, pushed - self.rounds) * self.steps + self.steps_total + self.taken

    def step(self) -> bool:
        """One inner step; True when the round is complete and its delta is due."""
        self.inner.step()
        self.taken += 1
        return self.taken >= self.round_steps

    def delta(self) -> list[torch.Tensor]:
        """start - now, one flat float32 host tensor per shard (reused buffers), as the
        method sends it (its `outgoing` hook)."""
        if self.rounds:  # a process's first round also holds its wait for the run to start
            self.own_step_s = smoothed(self.own_step_s, (self._clock() - self._began) / self.taken)
        self.rounds += 1
        self.steps_total += self.taken
        return self.method.outgoing(self.sync.deltas_from(self.start), self.codecs)

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "taken": self.taken,
                "start": [t.detach().cpu().clone() for t in self.start]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume a round: the inner optimizer's state, the steps taken and where the round began."""
        self.inner.load_state_dict(state["inner"])
        self.taken = int(state["taken"])
        for dst, src in zip(self.start, state["start"]):
            dst.copy_(src)
