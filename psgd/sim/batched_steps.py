"""The executor's batched steps (psgd.sim.batched): many workers' plain steps
in one vmapped call, with the first call checked against the exact path and
a fallback to one by one, with its reason, when vmap fails or disagrees.
A mixin of psgd.sim.executor.Executor, whose state it uses."""
from __future__ import annotations

import time
from typing import Optional

import torch

from psgd.sim.batched import RTOL, max_relative_error
from psgd.workers.step import forward_backward, step_outcome

__all__ = ["BatchedSteps"]


class BatchedSteps:
    def compute_together(self, steps: dict[int, float]) -> dict[int, list]:
        """The plain steps of the workers `steps` names (rank: step_s), each at the
        parameters it holds now: one vmapped call where the batcher allows, else
        one by one. Each worker's pushes, as `compute` returns them."""
        ranks = list(steps)
        batches = {r: next(self.workers[r].batches) for r in ranks}
        shapes: dict[tuple, list[int]] = {}
        for r in ranks:  # a short last batch cannot be stacked with full ones
            shapes.setdefault((batches[r][0].shape, batches[r][1].shape), []).append(r)
        out: dict[int, list] = {}
        for group in shapes.values():
            if self.batcher is not None and len(group) > 1:
                grads = self._batched(group, batches)
                if grads is not None:
                    for r in group:
                        out[r] = self._finish(self.workers[r], grads[r], steps[r])
                    continue
            for r in group:
                out[r] = self._step(self.workers[r], steps[r], batches[r])
        return {r: out[r] for r in ranks}

    def _batched(self, ranks: list[int], batches: dict) -> Optional[dict]:
        """The workers' gradients and losses from the batcher, or None once it
        has fallen back (a failed or wrong first call: the reason is kept)."""
        t0 = time.process_time()
        bufs = [self._gradient_buffers() for _ in ranks]
        try:
            losses = self.batcher.compute([self.workers[r].params for r in ranks], [batches[r][0] for r in ranks],
                                          [batches[r][1] for r in ranks], bufs)
        except RuntimeError as exc:  # vmap refuses: randomness, in-place updates of captured state, ...
            self._fall_back(f"vmap failed: {str(exc).splitlines()[0]}", bufs)
            return None
        self.gradient_s += time.process_time() - t0
        if not self._checked:
            err = self._check_first(ranks[0], batches[ranks[0]], bufs[0])
            if err > RTOL:
                self._fall_back(f"batched gradients differ from the exact path by {err:.2e} of the largest "
                                f"(more than {RTOL:g})", bufs)
                return None
        self.batched_steps += len(ranks)
        return {r: (g, loss) for r, g, loss in zip(ranks, bufs, losses)}

    def _check_first(self, rank: int, batch: tuple, got: list[torch.Tensor]) -> float:
        """The exact path's gradient for one worker of the first batch, against the batcher's."""
        self._checked = True
        want = [torch.zeros(n) for n in self.layout.shard_sizes]
        self.binding.bind(self.workers[rank].params)
        self.binding.bind_grads(want)
        forward_backward(self.task, self.model, batch)
        self.binding.gather_split(want)
        return max_relative_error(got, want)

    def _fall_back(self, reason: str, bufs: list[list[torch.Tensor]]) -> None:
        self.batcher, self.batch_fallback = None, reason
        for grads in bufs:
            for s, g in enumerate(grads):
                self._free[s].append(g)

    def _finish(self, w, grad_loss: tuple, step_s: float) -> list:
        grads, loss = grad_loss
        self.stepped_on(w)
        w.last_loss = loss
        w.steps += 1
        out = step_outcome(None, lambda: grads)
        return self.send(w, out.tensors, step_s, out.steps, owned=True)
