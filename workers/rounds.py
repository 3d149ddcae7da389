"""A local method's schedule as the real worker runs it: one object per `Schedule`
(psgd.core.local_methods.base), built from the method, which psgd.Optimizer calls the
same way whatever the method. The decisions (round length, which fragment leaves when,
what a delta becomes before it leaves) are the method's hooks; these objects only send
and wait through the client. The simulator's workers call the same hooks through the
same schedule state (LocalRounds, FragmentRounds), with simulated time in between.

`WholeRounds` is the schedule of every method whose round ends in one push of the
whole model's delta and a wait for the next start (local SGD, DiLoCo, async DiLoCo,
DyLU, SparseLoCo).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping

import torch

from psgd.core.local_methods import Codecs, LocalMethod
from psgd.workers.client import PSClient
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.step import Outgoing, flush_outcome, step_outcome

__all__ = ["WorkerRounds", "WholeRounds"]


class WorkerRounds(ABC):
    """What psgd.Optimizer asks of a local method's schedule. Blocking where it waits
    for the shards; not thread-safe."""

    def __init__(self, method: LocalMethod, client: PSClient, sync: ModelSync):
        self.method, self.client, self.sync = method, client, sync

    @classmethod
    @abstractmethod
    def build(cls, method: LocalMethod, client: PSClient, sync: ModelSync, inner: torch.optim.Optimizer,
              codecs: Codecs) -> "WorkerRounds":
        """The schedule of a worker that steps `inner` on the model `sync` holds."""

    @abstractmethod
    def step(self) -> None:
        """One inner step (the gradients are in the model), and whatever exchange it makes due."""

    @abstractmethod
    def flush(self) -> None:
        """Push the steps not yet sent, however few (a budget ended mid-round), and take the reply."""

    def drain(self) -> None:
        """Collect what is in flight (the worker is leaving); the base sends nothing ahead."""
        return None

    @property
    def clock(self) -> int:
        """Rounds this worker has completed, as psgd.Optimizer.clock reports them."""
        return self.client.clock

    @property
    def seqs(self) -> int:
        """Seqs this rank has used (a restart's predecessors' included)."""
        return self.client.seq

    @property
    @abstractmethod
    def steps_taken(self) -> int:
        """Training steps of this rank (psgd.Optimizer.steps_taken)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """This worker's part of psgd.Optimizer.state_dict (the inner optimizer lives here)."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from psgd.Optimizer.state_dict's entries (a missing entry: nothing to resume)."""

    def done_fields(self) -> dict:
        """Fields the schedule adds to the worker's done event."""
        return {}


class WholeRounds(WorkerRounds):
    """After each round: the whole model's delta, and the shards' reply starts the next round."""

    def __init__(self, method: LocalMethod, client: PSClient, sync: ModelSync, local: LocalRounds):
        super().__init__(method, client, sync)
        self.local = local

    @classmethod
    def build(cls, method, client, sync, inner, codecs):
        return cls(method, client, sync, LocalRounds(method, sync, inner, lambda: client.fastest_step_s,
                                                     codecs=codecs))

    def step(self) -> None:
        self._push(step_outcome(self.local, self.sync.gradients))  # the simulator's workers run it too

    def flush(self) -> None:
        self._push(flush_outcome(self.local))

    def _push(self, out: Outgoing | None) -> None:
        if out is None:
            return
        self.sync.load(self.client.push_pull(out.tensors, steps=out.steps))
        self.local.begin()

    @property
    def steps_taken(self) -> int:
        return self.local.steps_taken(self.client.seq)

    def state_dict(self) -> dict:
        return {"local": {**self.local.state_dict(), "method": self.method.state_dict()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "local" in state:
            self.local.load_state_dict(state["local"])
            self.method.load_state_dict(state["local"].get("method", {}))
