"""The executor's streaming DiLoCo steps (psgd.workers.fragment_rounds): a worker's
inner step, its fragment's push to that fragment's shards only (with each shard's
own seq and clock, as PSClient's fragment pushes), and the landing of the synced
parameters. The engine's FragmentTurns (psgd.sim.fragment_turns) decides when each
happens. Handed the executor whose workers it steps; the contract is RoundSteps'
(psgd.sim.round_steps)."""
from __future__ import annotations

import time
from typing import Optional

from psgd.workers.fragment_rounds import FragmentRounds
from psgd.workers.step import forward_backward

__all__ = ["FragmentSteps"]


class FragmentSteps:
    def __init__(self, ex):
        self.ex = ex

    def attach(self, w, method, inner) -> None:
        """Worker `w` runs `method`'s fragments from the parameters it holds, stepping `inner`."""
        ex = self.ex
        ex.sync.load(w.params)
        w.fragments = FragmentRounds(method, ex.sync, inner, ex.num_shards)
        w.own = ex.sync.flat_params()

    def compute(self, w, step_s: float, round_steps: Optional[int]) -> None:
        """One inner step of a streaming worker on its own parameters (the engine sends and lands)."""
        ex = self.ex
        ex.sync.load(w.own)
        batch = next(w.batches)
        t0 = time.process_time()
        ex.model.zero_grad(set_to_none=False)
        loss = forward_backward(ex.task, ex.model, batch)  # the worker process's step
        ex.gradient_s += time.process_time() - t0
        w.last_loss = loss.item()
        w.steps += 1
        w.fragments.step()
        w.own = ex.sync.flat_params(out=w.own)
        return None

    def flush(self, w, step_s: float) -> None:
        return None  # the engine's turns flush the fragments one by one

    def receive(self, w) -> bool:
        """Whether every shard of the fragment in flight has replied."""
        if w.fragments.in_flight is None:
            return False
        return all(s in w.replies for s in w.fragments.shards[w.fragments.in_flight[0]])

    @staticmethod
    def clock(w) -> int:
        return min(c.clock for c in w.shard_cursors)  # each shard counts its own fragment's pushes

    @staticmethod
    def pull_clock(w, s: int) -> int:
        return w.shard_cursors[s].clock

    @staticmethod
    def seqs(w) -> int:
        return sum(c.seq for c in w.shard_cursors)

    def steps_taken(self, w) -> int:
        return w.fragments.steps_taken(self.clock(w))

    def merge_due(self, rank: int) -> bool:
        """Whether the worker's fragment in flight must land before it goes on."""
        return self.ex.workers[rank].fragments.merge_due() is not None

    def landed(self, rank: int) -> bool:
        return self.receive(self.ex.workers[rank])

    def merge(self, rank: int) -> None:
        """The fragment in flight lands (its replies are all in): as FragmentRounds.merge."""
        ex, w = self.ex, self.ex.workers[rank]
        fragment = w.fragments.in_flight[0]
        ex.sync.load(w.own)
        w.fragments.merge(fragment, {s: r.params for s, r in w.replies.items()})
        for s, r in w.replies.items():
            w.versions[s] = r.version
            r.read.done = True  # merged by copy: the shard may update them now
            w.fastest_step_s = r.fastest_step_s or w.fastest_step_s
            w.shard_cursors[s].adopt([r.clock])
        w.replies = {}
        w.own = ex.sync.flat_params(out=w.own)

    def pending(self, rank: int) -> list[int]:
        return self.ex.workers[rank].fragments.pending()

    def send(self, rank: int, step_s: float, fragment: Optional[int] = None) -> Optional[list]:
        """The pushes of `fragment` (None: the one whose turn follows the step just taken;
        None returned when there is none), to its shards only."""
        ex, w = self.ex, self.ex.workers[rank]
        if fragment is None:
            due = w.fragments.sends_due()
            if not due:
                return None
            fragment = due[0]  # distinct offsets: at most one fragment per step
        ex.sync.load(w.own)
        deltas, steps = w.fragments.delta(fragment)
        pushes = []
        for s, g in deltas.items():
            cursor = w.shard_cursors[s]
            pushes.append(ex.encoded_push(w, s, g, cursor.seq, cursor.clock, step_s, steps))
            cursor.pushed(cursor.seq, cursor.clock)
        w.replies = {}
        w.pushes += 1
        w.peak_push_bytes = max(w.peak_push_bytes, sum(p.wire_bytes for p in pushes))
        return pushes
