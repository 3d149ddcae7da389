"""The worker side of streaming DiLoCo (psgd.core.local_methods.streaming_diloco):
the inner steps, and which fragment's delta leaves or lands after each, with no
transport of its own. The real worker (psgd.Optimizer) sends through PSClient's
fragment pushes; the virtual cluster (psgd.sim) through its shards; both call these
methods in the same order, so a simulated worker trains as a real one does.

Per shard, `start` holds the parameters its fragment last synced to (the shards'
reply): the next delta of that fragment is start - now, as DiLoCo's is.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from psgd.core.local_methods.streaming_diloco import StreamingDiLoCo, fragment_shards
from psgd.workers.client import PSClient, Request
from psgd.workers.model_sync import ModelSync
from psgd.workers.rounds import WorkerRounds

__all__ = ["FragmentRounds", "StreamingRounds"]


class FragmentRounds:
    def __init__(self, method: StreamingDiLoCo, sync: ModelSync, inner: torch.optim.Optimizer, num_shards: int):
        self.method = method
        self.sync = sync
        self.inner = inner
        self.shards = fragment_shards(method.fragments, num_shards)
        self.steps = method.local.steps  # H
        self.start: list[torch.Tensor] = []
        self.taken_total = 0                        # inner steps this process has taken
        self.since = [0] * method.fragments         # inner steps since each fragment last left
        self.sends = [0] * method.fragments         # deltas each fragment has sent
        self.in_flight: Optional[tuple[int, int]] = None  # (fragment, the step it left after)
        self.begin()

    def begin(self) -> None:
        """Every fragment starts from the parameters the model holds now (just pulled)."""
        self.start = self.sync.flat_params(out=self.start or None)

    def step(self) -> None:
        """One inner step."""
        self.inner.step()
        self.taken_total += 1
        for f in range(len(self.since)):
            self.since[f] += 1

    def merge_due(self) -> Optional[int]:
        """The fragment in flight whose synced parameters must land now (tau steps after it left)."""
        if self.in_flight is None:
            return None
        fragment, left = self.in_flight
        return fragment if self.taken_total - left >= self.method.delay else None

    def sends_due(self) -> list[int]:
        """Fragments whose delta leaves after the step just taken."""
        return self.method.sends_after(self.taken_total)

    def delta(self, fragment: int) -> tuple[dict[int, torch.Tensor], int]:
        """(shard -> start - now for the fragment's shards, the inner steps behind it); the
        fragment is in flight from here until `merge`."""
        if self.in_flight is not None:
            raise RuntimeError(f"fragment {self.in_flight[0]} is still in flight")
        deltas = self.sync.deltas_from(self.start)
        steps, self.since[fragment] = self.since[fragment], 0
        self.sends[fragment] += 1
        self.in_flight = (fragment, self.taken_total)
        return {s: deltas[s] for s in self.shards[fragment]}, steps

    def merge(self, fragment: int, synced: Mapping[int, torch.Tensor]) -> None:
        """The shards' parameters for `fragment` landed: the next delta is measured from
        them, and the model takes alpha * its own + (1 - alpha) * them (lerp: exact at 0)."""
        if self.in_flight is None or self.in_flight[0] != fragment:
            raise RuntimeError(f"fragment {fragment} is not in flight")
        own = self.sync.flat_params()
        for s in self.shards[fragment]:
            self.start[s].copy_(synced[s])
            torch.lerp(self.start[s], own[s], self.method.alpha, out=own[s])
        self.sync.load(own)
        self.in_flight = None

    def pending(self) -> list[int]:
        """Fragments with steps not yet sent (a worker whose budget ends flushes them)."""
        return [f for f, n in enumerate(self.since) if n]

    @property
    def rounds(self) -> int:
        """Rounds every fragment has sent."""
        return min(self.sends)

    def steps_taken(self, clock: int) -> int:
        """Training steps of this rank, whose slowest shard counts `clock` rounds: the rounds
        before this process (a restart) at their nominal length, then the steps taken here."""
        return max(0, clock - self.rounds) * self.steps + self.taken_total

    def state_dict(self) -> dict:
        return {"inner": self.inner.state_dict(), "taken_total": self.taken_total, "since": list(self.since),
                "start": [t.detach().cpu().clone() for t in self.start]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the inner optimizer's state, the schedule's position and where each fragment began."""
        self.inner.load_state_dict(state["inner"])
        self.taken_total = int(state["taken_total"])
        self.since = [int(n) for n in state["since"]]
        for dst, src in zip(self.start, state["start"]):
            dst.copy_(src)


class StreamingRounds(WorkerRounds):
    """Streaming DiLoCo's schedule for psgd.Optimizer (psgd.workers.rounds): each fragment is
    pushed to its shards only (PSClient's fragment pushes, each shard's own seq and clock)."""

    def __init__(self, method: StreamingDiLoCo, client: PSClient, sync: ModelSync, fragments: FragmentRounds):
        super().__init__(method, client, sync)
        self.fragments = fragments
        self._in_flight: Optional[Request] = None  # the fragment push under way

    @classmethod
    def build(cls, method, client, sync, inner, codecs):
        return cls(method, client, sync, FragmentRounds(method, sync, inner, sync.layout.num_shards))

    def step(self) -> None:
        """After an inner step: the fragment in flight lands when due (waiting for it), then any
        fragment whose turn it is leaves (and lands at once when tau is 0)."""
        rounds = self.fragments
        rounds.step()
        due = rounds.merge_due()
        if due is not None:
            self._land(due)
        for fragment in rounds.sends_due():
            self._send(fragment)
            if rounds.merge_due() is not None:
                self._land(fragment)

    def flush(self) -> None:
        """The fragment in flight lands, then every fragment's unsent steps go."""
        self.drain()
        for fragment in self.fragments.pending():
            self._send(fragment)
            self._land(fragment)

    def drain(self) -> None:
        if self._in_flight is not None:
            self._land(self.fragments.in_flight[0])

    def _send(self, fragment: int) -> None:
        deltas, steps = self.fragments.delta(fragment)
        self._in_flight = self.client.start(deltas, steps=steps)

    def _land(self, fragment: int) -> None:
        request, self._in_flight = self._in_flight, None
        self.fragments.merge(fragment, self.client.wait(request))

    @property
    def clock(self) -> int:
        return min(c.clock for c in self.client.shard_cursors)  # each shard counts its own fragment's pushes

    @property
    def seqs(self) -> int:
        return sum(c.seq for c in self.client.shard_cursors)

    @property
    def steps_taken(self) -> int:
        return self.fragments.steps_taken(self.clock)  # one rule with the simulator's

    def state_dict(self) -> dict:
        return {"fragments": self.fragments.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "fragments" in state:
            self.fragments.load_state_dict(state["fragments"])
