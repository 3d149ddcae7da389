"""The executor's batched steps (psgd.sim.batched): many workers' plain steps
in one vmapped call, with the first call checked against the exact path and
a fallback to one by one, with its reason, when vmap fails or disagrees.
Handed the executor whose workers it steps; it owns the batcher and its fallback."""
from __future__ import annotations

import time
from typing import Optional

import torch

from psgd.sim.batched import RTOL, BatchedGradients, max_relative_error
from psgd.workers.step import forward_backward, step_outcome

__all__ = ["BatchedSteps"]


class BatchedSteps:
    def __init__(self, ex, batcher: Optional[BatchedGradients], fallback: Optional[str]):
        self.ex = ex
        self.batcher = batcher    # None: every gradient takes the exact path
        self.fallback = fallback  # why a batched run computes one by one
        self.checked = False      # the batcher's first call is checked against the exact path
        self.steps = 0            # worker steps whose gradient came from a batched call

    def compute_together(self, steps: dict[int, float]) -> dict[int, list]:
        """The plain steps of the workers `steps` names (rank: step_s), each at the
        parameters it holds now: one vmapped call where the batcher allows, else
        one by one. Each worker's pushes, as `compute` returns them."""
        ex = self.ex
        ranks = list(steps)
        batches = {r: next(ex.workers[r].batches) for r in ranks}
        shapes: dict[tuple, list[int]] = {}
        for r in ranks:  # a short last batch cannot be stacked with full ones
            shapes.setdefault((batches[r][0].shape, batches[r][1].shape), []).append(r)
        out: dict[int, list] = {}
        for group in shapes.values():
            if self.batcher is not None and len(group) > 1:
                grads = self._batched(group, batches)
                if grads is not None:
                    for r in group:
                        out[r] = self._finish(ex.workers[r], grads[r], steps[r])
                    continue
            for r in group:
                out[r] = ex.step(ex.workers[r], steps[r], batches[r])
        return {r: out[r] for r in ranks}

    def _batched(self, ranks: list[int], batches: dict) -> Optional[dict]:
        """The workers' gradients and losses from the batcher, or None once it
        has fallen back (a failed or wrong first call: the reason is kept)."""
        ex = self.ex
        t0 = time.process_time()
        bufs = [ex.gradient_buffers() for _ in ranks]
        try:
            losses = self.batcher.compute([ex.workers[r].params for r in ranks], [batches[r][0] for r in ranks],
                                          [batches[r][1] for r in ranks], bufs)
        except RuntimeError as exc:  # vmap refuses: randomness, in-place updates of captured state, ...
            self._fall_back(f"vmap failed: {str(exc).splitlines()[0]}", bufs)
            return None
        ex.gradient_s += time.process_time() - t0
        if not self.checked:
            err = self._check_first(ranks[0], batches[ranks[0]], bufs[0])
            if err > RTOL:
                self._fall_back(f"batched gradients differ from the exact path by {err:.2e} of the largest "
                                f"(more than {RTOL:g})", bufs)
                return None
        self.steps += len(ranks)
        return {r: (g, loss) for r, g, loss in zip(ranks, bufs, losses)}

    def _check_first(self, rank: int, batch: tuple, got: list[torch.Tensor]) -> float:
        """The exact path's gradient for one worker of the first batch, against the batcher's."""
        ex = self.ex
        self.checked = True
        want = [torch.zeros(n) for n in ex.layout.shard_sizes]
        ex.binding.bind(ex.workers[rank].params)
        ex.binding.bind_grads(want)
        forward_backward(ex.task, ex.model, batch)
        ex.binding.gather_split(want)
        return max_relative_error(got, want)

    def _fall_back(self, reason: str, bufs: list[list[torch.Tensor]]) -> None:
        self.batcher, self.fallback = None, reason
        for grads in bufs:
            for s, g in enumerate(grads):
                self.ex.free(s, g)

    def _finish(self, w, grad_loss: tuple, step_s: float) -> list:
        grads, loss = grad_loss
        self.ex.stepped_on(w)
        w.last_loss = loss
        w.steps += 1
        out = step_outcome(None, lambda: grads)
        return self.ex.send(w, out.tensors, step_s, out.steps, owned=True)
