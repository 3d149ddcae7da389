"""The executor's streaming DiLoCo steps (psgd.workers.fragment_rounds): a worker's
inner step, its fragment's push to that fragment's shards only (with each shard's
own seq and clock, as PSClient's fragment pushes), and the landing of the synced
parameters. The engine (psgd.sim.engine) decides when each happens.
A mixin of psgd.sim.executor.Executor, whose state it uses."""
from __future__ import annotations

import time
from typing import Optional

from psgd.workers.step import forward_backward

__all__ = ["FragmentSteps"]


class FragmentSteps:
    def _fragment_step(self, w) -> None:
        """One inner step of a streaming worker on its own parameters."""
        self.sync.load(w.own)
        batch = next(w.batches)
        t0 = time.process_time()
        self.model.zero_grad(set_to_none=False)
        loss = forward_backward(self.task, self.model, batch)  # the worker process's step
        self.gradient_s += time.process_time() - t0
        w.last_loss = loss.item()
        w.steps += 1
        w.fragments.step()
        w.own = self.sync.flat_params(out=w.own)

    def fragment_merge_due(self, rank: int) -> bool:
        """Whether the worker's fragment in flight must land before it goes on."""
        return self.workers[rank].fragments.merge_due() is not None

    def fragment_landed(self, rank: int) -> bool:
        """Whether every shard of the fragment in flight has replied."""
        w = self.workers[rank]
        if w.fragments.in_flight is None:
            return False
        return all(s in w.replies for s in w.fragments.shards[w.fragments.in_flight[0]])

    def fragment_merge(self, rank: int) -> None:
        """The fragment in flight lands (its replies are all in): as FragmentRounds.merge."""
        w = self.workers[rank]
        fragment = w.fragments.in_flight[0]
        self.sync.load(w.own)
        w.fragments.merge(fragment, {s: r.params for s, r in w.replies.items()})
        for s, r in w.replies.items():
            w.versions[s] = r.version
            r.read.done = True  # merged by copy: the shard may update them now
            w.fastest_step_s = r.fastest_step_s or w.fastest_step_s
            w.shard_cursors[s].adopt([r.clock])
        w.replies = {}
        w.own = self.sync.flat_params(out=w.own)

    def fragment_pending(self, rank: int) -> list[int]:
        return self.workers[rank].fragments.pending()

    def fragment_send(self, rank: int, step_s: float, fragment: Optional[int] = None) -> Optional[list]:
        """The pushes of `fragment` (None: the one whose turn follows the step just taken;
        None returned when there is none), to its shards only."""
        w = self.workers[rank]
        if fragment is None:
            due = w.fragments.sends_due()
            if not due:
                return None
            fragment = due[0]  # distinct offsets: at most one fragment per step
        self.sync.load(w.own)
        deltas, steps = w.fragments.delta(fragment)
        pushes = []
        for s, g in deltas.items():
            cursor = w.shard_cursors[s]
            pushes.append(self._encoded_push(w, s, g, cursor.seq, cursor.clock, step_s, steps))
            cursor.pushed(cursor.seq, cursor.clock)
        w.replies = {}
        w.pushes += 1
        w.peak_push_bytes = max(w.peak_push_bytes, sum(p.wire_bytes for p in pushes))
        return pushes
