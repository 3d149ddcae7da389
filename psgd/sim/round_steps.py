"""The executor's steps for whole-model rounds (Schedule.ROUNDS, and plain training): a
worker's step at the parameters it holds, under local updates one inner step of its round
(psgd.workers.local_rounds) and, at the round's end, the delta as the method sends it; the
replies of every shard start its next step. Handed the executor whose workers it steps;
psgd.sim.fragment_steps is the same contract for streaming DiLoCo's fragments."""
from __future__ import annotations

import time
from typing import Optional

from psgd.sim.messages import Push
from psgd.workers.local_rounds import LocalRounds
from psgd.workers.step import flush_outcome, forward_backward, step_outcome

__all__ = ["RoundSteps"]


class RoundSteps:
    def __init__(self, ex):
        self.ex = ex

    def attach(self, w, method, inner) -> None:
        """Worker `w` runs `method`'s rounds, stepping `inner` (its own state) on the shared model."""
        ex = self.ex
        w.local = LocalRounds(method, ex.sync, inner, lambda: w.fastest_step_s, clock=lambda: ex.now,
                              codecs=ex.codecs)

    def compute(self, w, step_s: float, round_steps: Optional[int]) -> Optional[list[Push]]:
        """A local round's inner step (psgd.sim.executor.Executor.compute)."""
        ex = self.ex
        if w.own is None:  # a round starts from the parameters just pulled
            ex.sync.load(w.params)
            w.local.begin()
            if round_steps is not None:
                w.local.round_steps = round_steps
            w.own = [t.clone() for t in w.local.start]
        ex.sync.load(w.own)
        batch = next(w.batches)
        t0 = time.process_time()
        ex.model.zero_grad(set_to_none=False)
        loss = forward_backward(ex.task, ex.model, batch)
        ex.gradient_s += time.process_time() - t0
        w.last_loss = loss.item()
        w.steps += 1
        ex.stepped_on(w)
        out = step_outcome(w.local, ex.sync.gradients)  # the inner step, as psgd.Optimizer.step takes it
        if out is None:
            w.own = ex.sync.flat_params(out=w.own)
            return None
        return ex.send(w, out.tensors, step_s, out.steps)

    def flush(self, w, step_s: float) -> Optional[list[Push]]:
        """The shorter round of a worker whose budget ended (as psgd.Optimizer.flush)."""
        if w.local is None or w.own is None:
            return None
        self.ex.sync.load(w.own)
        out = flush_outcome(w.local)
        return None if out is None else self.ex.send(w, out.tensors, step_s, out.steps)

    def receive(self, w) -> bool:
        """True once the worker holds every shard's reply (it takes them as its parameters)."""
        if len(w.replies) < self.ex.num_shards:
            return False
        for s, r in w.replies.items():
            w.params[s], w.versions[s] = r.params, r.version
            w.reads.append(r.read)
            w.fastest_step_s = r.fastest_step_s or w.fastest_step_s
        w.adopt(r.clock for r in w.replies.values())
        return True

    @staticmethod
    def clock(w) -> int:
        return w.clock

    @staticmethod
    def pull_clock(w, s: int) -> int:
        return w.clock

    @staticmethod
    def seqs(w) -> int:
        return w.seq

    @staticmethod
    def steps_taken(w) -> int:
        """As psgd.Optimizer.steps_taken counts them."""
        if w.local is None:
            return w.clock
        # A pushed round's steps moved into steps_total; the next round begins at its first step
        # here (a real worker begins it as the reply comes), so until then none is under way.
        return w.local.steps_taken(w.seq) - (w.local.taken if w.own is None else 0)
