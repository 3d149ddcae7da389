"""The engine's turns for each local method's schedule (psgd.core.local_methods.Schedule):
what happens after a worker's inner step, when its replies are in, and when its budget
ends. Whole-model rounds (RoundTurns) go on with the next step; streaming DiLoCo's
fragments (FragmentTurns, psgd.workers.fragment_rounds): after each inner step the
fragment in flight lands when due (the worker waits for it if its replies are not all
in), then the fragment whose turn it is leaves; with tau 0 the worker waits for it at
once, otherwise it computes on while the push and reply travel. A worker past its budget
lands what is in flight and sends every fragment's unsent steps, one after another,
before it leaves (as psgd.Optimizer.flush). Each is handed the engine whose events it
schedules, and the executor's schedule steps (psgd.sim.fragment_steps)."""
from __future__ import annotations

from enum import Enum

__all__ = ["FragmentTurns", "RoundTurns", "Waiting"]


class Waiting(Enum):
    """What a worker waiting for its fragment's replies does once they are in."""
    TO_SEND = "send"    # the fragment was due to land before this step's send
    TO_STEP = "step"    # tau 0: the fragment just sent lands, then the next step
    TO_FLUSH = "flush"  # past its budget: the flush goes on


class RoundTurns:
    """Whole-model rounds: the engine's own steps, pushes and replies do everything."""

    def __init__(self, engine):
        self.e = engine

    def after_inner_step(self, rank: int, t: float) -> None:
        self.e.start_step(rank, t)

    def replied(self, rank: int, t: float) -> bool:
        """Whether the turns took the worker's replies (False: the engine's own path)."""
        return False

    def finishing(self, rank: int, t: float) -> bool:
        """Whether a worker past its budget still has exchanges to finish before it leaves."""
        return False


class FragmentTurns:
    def __init__(self, engine):
        self.e, self.ex, self.steps = engine, engine.ex, engine.ex.steps
        self.landing: dict[int, Waiting] = {}  # workers waiting for their fragment's replies

    def after_inner_step(self, rank: int, t: float) -> None:
        """An inner step of a streaming worker ended at `t`."""
        if self.steps.merge_due(rank):
            if not self.steps.landed(rank):
                self.landing[rank] = Waiting.TO_SEND
                return
            t = self._land(rank, t)
        self._fragment_send(rank, t)

    def _fragment_send(self, rank: int, t: float) -> None:
        pushes = self.steps.send(rank, step_s=t - self.e.round_at[rank])
        if pushes is None:
            self.e.start_step(rank, t)
            return
        ready = self._send_fragment(pushes, t)
        if self.steps.merge_due(rank):  # tau 0: it lands before the next step
            self.landing[rank] = Waiting.TO_STEP
            return
        self.e.start_step(rank, ready)

    def _send_fragment(self, pushes: list, t: float) -> float:
        """The pushes leave once encoded (returns when), in the seeded order of sends at one
        instant that whole-model pushes take (Engine.start_step)."""
        e = self.e
        ready = t + e.time.before_push_s([self.ex.layout.shard_sizes[p.shard] for p in pushes],
                                         [p.shard for p in pushes])
        rank = pushes[0].rank
        e.step_done_at(ready, pushes, tie=e.send_order.priority(rank, self.ex.workers[rank].steps - 1))
        return ready

    def replied(self, rank: int, t: float) -> bool:
        """Every reply of the worker's fragment in flight is in (at `t`)."""
        how = self.landing.pop(rank, None)
        if how is None:
            return True  # computing on: it lands when due
        t = self._land(rank, t)
        if how is Waiting.TO_SEND:
            self._fragment_send(rank, t)
        else:
            self.e.start_step(rank, t)
        return True

    def _land(self, rank: int, t: float) -> float:
        """Merge the fragment's replies; returns when the parameters are on the device."""
        w = self.ex.workers[rank]
        numel = sum(self.ex.layout.shard_sizes[s] for s in w.fragments.shards[w.fragments.in_flight[0]])
        self.steps.merge(rank)
        self.e.round_at[rank] = t
        return t + self.e.time.after_pull_s(numel)

    def finishing(self, rank: int, t: float) -> bool:
        """A worker past its budget: False once nothing is in flight or unsent (it may leave);
        True while its last fragments travel (their replies resume it)."""
        w = self.ex.workers[rank]
        if w.fragments.in_flight is not None:
            if not self.steps.landed(rank):
                self.landing[rank] = Waiting.TO_FLUSH
                return True
            t = self._land(rank, t)
        pending = self.steps.pending(rank)
        if not pending:
            return False
        self.e.send(self.steps.send(rank, step_s=t - self.e.round_at[rank], fragment=pending[0]), t)  # as a flush
        self.landing[rank] = Waiting.TO_FLUSH
        return True
