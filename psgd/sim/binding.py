"""The shared model's parameters and gradients as views of per-shard flat tensors.

Every virtual worker runs its step on one shared model. Copying a worker's
parameters into that model before each step (and its gradients out of it
after) is what the real worker does across a process boundary; in one
process the model can instead read the shard's flat parameters in place and
backward can write straight into the flat gradient a push carries. A tensor
the layout splits over two shards cannot be one view: it keeps its own
storage and its pieces are copied, as before.

Values are unchanged: the same kernels read the same numbers, and gradients
accumulate into zeroed buffers exactly as `zero_grad(set_to_none=False)`
makes them do (tests/unit/sim/test_exact.py, tests/e2e/test_replay_e2e.py).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from psgd.core.sharding import Layout

__all__ = ["ModelBinding"]


class ModelBinding:
    def __init__(self, params: Sequence[torch.nn.Parameter], layout: Layout):
        self.params = list(params)
        self.layout = layout
        self._own = [p.data for p in self.params]  # the model's own storage (split tensors, restore)
        # Per tensor: (shard, offset) when it lies in one shard, else None (split).
        where: list[Optional[tuple[int, int]]] = [None] * len(self.params)
        pieces = [0] * len(self.params)
        for shard, segs in enumerate(layout.segments):
            for s in segs:
                pieces[s.param] += 1
                where[s.param] = (shard, s.shard_offset - s.param_offset)
        self._where = [w if pieces[i] == 1 else None for i, w in enumerate(where)]
        self._split = [i for i, w in enumerate(self._where) if w is None]
        self._split_segs = [[(shard, s) for shard, segs in enumerate(layout.segments) for s in segs if s.param == i]
                            for i in self._split]
        self._views = [(i, w[0], w[1], p.numel(), p.shape) for i, (w, p) in enumerate(zip(self._where, self.params))
                       if w is not None]
        self._own_grads = {i: torch.zeros_like(self.params[i]) for i in self._split}
        self.bound = False

    def bind(self, shard_params: Sequence[torch.Tensor]) -> None:
        """The model's parameters read `shard_params` (one flat tensor per shard)
        from now on; nothing may change those tensors while the model uses them."""
        ps = self.params
        for i, shard, off, n, shape in self._views:
            ps[i].data = shard_params[shard][off:off + n].view(shape)
        for i, segs in zip(self._split, self._split_segs):
            own = self._own[i]
            flat = own.view(-1)
            for shard, s in segs:
                flat[s.param_offset:s.param_offset + s.length].copy_(
                    shard_params[shard][s.shard_offset:s.shard_offset + s.length])
            ps[i].data = own
        self.bound = True

    def unbind(self) -> None:
        """The parameters get their own storage back (before anything copies into them)."""
        if self.bound:
            for p, own in zip(self.params, self._own):
                p.data = own
            self.bound = False

    def bind_grads(self, flat_grads: Sequence[torch.Tensor]) -> None:
        """Backward accumulates into zeroed `flat_grads` (one per shard); a split
        tensor's gradient into its own zeroed buffer, gathered by `gather_split`."""
        ps = self.params
        for i, shard, off, n, shape in self._views:
            ps[i].grad = flat_grads[shard][off:off + n].view(shape)
        for i in self._split:
            ps[i].grad = self._own_grads[i].zero_()

    def gather_split(self, flat_grads: Sequence[torch.Tensor]) -> None:
        for i, segs in zip(self._split, self._split_segs):
            flat = self.params[i].grad.view(-1)
            for shard, s in segs:
                flat_grads[shard][s.shard_offset:s.shard_offset + s.length].copy_(
                    flat[s.param_offset:s.param_offset + s.length])

    def tensors(self, shard_params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Each model parameter's value in `shard_params`: a view where it lies in
        one shard, an assembled copy where the layout splits it."""
        out: list[Optional[torch.Tensor]] = [None] * len(self.params)
        for i, shard, off, n, shape in self._views:
            out[i] = shard_params[shard][off:off + n].view(shape)
        for i, segs in zip(self._split, self._split_segs):
            flat = torch.empty(self.params[i].numel(), dtype=self.params[i].dtype,
                               device=shard_params[0].device)  # where the versions live (cuda too)
            for shard, s in segs:
                flat[s.param_offset:s.param_offset + s.length] = shard_params[shard][s.shard_offset:
                                                                                     s.shard_offset + s.length]
            out[i] = flat.view(self.params[i].shape)
        return out

    def scatter_grads(self, grads: Sequence[torch.Tensor], flat_grads: Sequence[torch.Tensor]) -> None:
        """Per-parameter gradients `grads` into the flat per-shard `flat_grads`."""
        for i, shard, off, n, _ in self._views:
            flat_grads[shard][off:off + n].copy_(grads[i].reshape(-1))
        for i, segs in zip(self._split, self._split_segs):
            flat = grads[i].reshape(-1)
            for shard, s in segs:
                flat_grads[shard][s.shard_offset:s.shard_offset + s.length].copy_(
                    flat[s.param_offset:s.param_offset + s.length])
