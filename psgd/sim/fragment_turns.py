"""The engine's streaming DiLoCo turns (psgd.workers.fragment_rounds): after each
inner step the fragment in flight lands when due (the worker waits for it if its
replies are not all in), then the fragment whose turn it is leaves; with tau 0 the
worker waits for it at once, otherwise it computes on while the push and reply
travel. A worker past its budget lands what is in flight and sends every
fragment's unsent steps, one after another, before it leaves (as psgd.Optimizer.flush).
A mixin of psgd.sim.engine.Engine, whose state it uses."""
from __future__ import annotations

from enum import Enum

__all__ = ["FragmentTurns", "Waiting"]


class Waiting(Enum):
    """What a worker waiting for its fragment's replies does once they are in."""
    TO_SEND = "send"    # the fragment was due to land before this step's send
    TO_STEP = "step"    # tau 0: the fragment just sent lands, then the next step
    TO_FLUSH = "flush"  # past its budget: the flush goes on


class FragmentTurns:
    def _fragment_turn(self, rank: int, t: float) -> None:
        """An inner step of a streaming worker ended at `t`."""
        if self.ex.fragment_merge_due(rank):
            if not self.ex.fragment_landed(rank):
                self.landing[rank] = Waiting.TO_SEND
                return
            t = self._land(rank, t)
        self._fragment_send(rank, t)

    def _fragment_send(self, rank: int, t: float) -> None:
        pushes = self.ex.fragment_send(rank, step_s=t - self.round_at[rank])
        if pushes is None:
            self._start_step(rank, t)
            return
        ready = self._send_fragment(pushes, t)
        if self.ex.fragment_merge_due(rank):  # tau 0: it lands before the next step
            self.landing[rank] = Waiting.TO_STEP
            return
        self._start_step(rank, ready)

    def _send_fragment(self, pushes: list, t: float) -> float:
        """The pushes leave once encoded (returns when), in the seeded order of sends at one
        instant that whole-model pushes take (Engine._start_step)."""
        ready = t + self.time.before_push_s([self.ex.layout.shard_sizes[p.shard] for p in pushes],
                                            [p.shard for p in pushes])
        rank = pushes[0].rank
        self._step_done_at(ready, pushes, tie=self.send_order.priority(rank, self.ex.workers[rank].steps - 1))
        return ready

    def _fragment_landed(self, rank: int, t: float) -> None:
        """Every reply of the worker's fragment in flight is in (at `t`)."""
        how = self.landing.pop(rank, None)
        if how is None:
            return  # computing on: it lands when due
        t = self._land(rank, t)
        if how is Waiting.TO_SEND:
            self._fragment_send(rank, t)
        else:
            self._start_step(rank, t)

    def _land(self, rank: int, t: float) -> float:
        """Merge the fragment's replies; returns when the parameters are on the device."""
        w = self.ex.workers[rank]
        numel = sum(self.ex.layout.shard_sizes[s] for s in w.fragments.shards[w.fragments.in_flight[0]])
        self.ex.fragment_merge(rank)
        self.round_at[rank] = t
        return t + self.time.after_pull_s(numel)

    def _fragments_flushed(self, rank: int, t: float) -> bool:
        """A worker past its budget: False once nothing is in flight or unsent (it may leave);
        True while its last fragments travel (their replies resume it)."""
        w = self.ex.workers[rank]
        if w.fragments.in_flight is not None:
            if not self.ex.fragment_landed(rank):
                self.landing[rank] = Waiting.TO_FLUSH
                return True
            t = self._land(rank, t)
        pending = self.ex.fragment_pending(rank)
        if not pending:
            return False
        self._send(self.ex.fragment_send(rank, step_s=t - self.round_at[rank], fragment=pending[0]), t)  # as a flush
        self.landing[rank] = Waiting.TO_FLUSH
        return True
