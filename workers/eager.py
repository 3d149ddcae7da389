"""The eager outer step (`local.eager`, after Kale et al. 2025, arXiv 2502.12996): a
worker never waits for the outer step between its rounds.

At the end of round k it pushes its delta D_k = s_k - e_k (start minus end) and,
without waiting for the reply, starts round k + 1 from

    s_{k+1} = theta_k - D_k

where theta_k is the newest parameters it has from the shards: the reply to its
push of round k - 1 (round 0: the parameters it started from). That is its own
end point e_k with the outer update folded in, theta_k - s_k, which replaces
the guess its previous start made: the worker continues from its own
parameters and folds each outer update in one round after its round ended.
The reply is collected at the end of round k + 1, so the exchange overlaps a
whole inner phase. Each delta names the versions of the parameters its round
started from, so the shards count the one round of delay in their staleness
histogram (1 for every round after the first under bsp); `delayed` counts the
rounds this worker began without the previous round's outer update.
"""
from __future__ import annotations

from typing import Optional

import torch

from psgd.core.local_methods import LocalMethod
from psgd.workers.client import PSClient, Request
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.model_sync import ModelSync
from psgd.workers.rounds import WholeRounds

__all__ = ["EagerRounds"]


class EagerRounds(WholeRounds):
    """The eager method's schedule for psgd.Optimizer (psgd.workers.rounds)."""

    def __init__(self, method: LocalMethod, client: PSClient, sync: ModelSync, local: LocalRounds):
        super().__init__(method, client, sync, local)
        self.pending: Optional[Request] = None  # the push whose reply folds in next
        self.read_versions = list(client.versions)   # of the parameters the round under way started from
        self.delayed = 0                              # rounds begun before the previous round's outer update
        self._next: list[torch.Tensor] = []          # the next round's start, flat per shard

    def step(self) -> None:
        """One inner step; at a round's end, its push, and the next round begins without waiting."""
        if self.local.step():
            self.round_done()

    def done_fields(self) -> dict:
        return {"outer_delayed_rounds": self.delayed}

    def round_done(self) -> None:
        """The round is complete: fold in the previous round's outer update, push this
        round's delta, and begin the next round at once."""
        if self.pending is not None:
            newest = list(self.client.wait(self.pending).values())  # theta_k: waits only if it is not in yet
            self.pending = None
        else:
            newest = [t.cpu() for t in self.local.start]  # round 0 started from the shards' parameters
        versions = list(self.client.versions)
        taken = self.local.taken
        delta = self.local.delta()  # the push's buffers: read by the push, not written until the next round
        if not self._next:
            self._next = [torch.empty_like(d) for d in delta]
        for out, base, d in zip(self._next, newest, delta):
            torch.sub(base, d, out=out)  # before the push: a reply may reuse the region `newest` views
        self.pending = self.client.start(delta, steps=taken, read_versions=self.read_versions)
        self.read_versions = versions
        self.sync.load(self._next)
        self.local.begin()
        self.delayed += 1

    def drain(self) -> None:
        """Collect the push in flight and take its reply as the model's parameters (the
        run is ending: nothing is left to overlap it with)."""
        if self.pending is not None:
            request, self.pending = self.pending, None
            self.sync.load(list(self.client.wait(request).values()))
            self.read_versions = list(self.client.versions)

    def flush(self) -> None:
        """Push a partial round (the budget ended mid-round) after the one in flight, wait
        for its reply and take it as the model's parameters."""
        if not self.local.taken:
            self.drain()
            return
        if self.pending is not None:
            request, self.pending = self.pending, None
            self.client.wait(request)  # its reply is superseded by the next one
        taken = self.local.taken
        request = self.client.start(self.local.delta(), steps=taken, read_versions=self.read_versions)
        self.sync.load(list(self.client.wait(request).values()))
        self.read_versions = list(self.client.versions)
        self.local.begin()
