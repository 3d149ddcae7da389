"""Moves parameters and gradients between a model and per-shard flat tensors.

On CUDA, gradients are gathered on the device, copied into pinned host
buffers with non-blocking copies (one synchronise before sending), and pulled
parameters are staged through pinned buffers into the existing parameter
storage: nothing is reallocated per step. On CPU the same code runs with
ordinary host buffers. On CPU a gradient whose shard is reached through shared
memory is flattened straight into the segment's request region
(`gradient_buffers`, set to the client's), so sending it copies nothing.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from psgd.core.sharding import Layout

__all__ = ["ModelSync", "select_device"]


def select_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu; 'cuda' without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("workers.device is 'cuda' but torch sees no CUDA device")
    return torch.device(name)


class ModelSync:
    def __init__(self, model: nn.Module, layout: Layout, device: torch.device, pin_memory: bool = True):
        self.layout = layout
        self.device = torch.device(device)
        self.params = [p for p in model.parameters() if p.requires_grad]
        cuda = self.device.type == "cuda"
        pin = pin_memory and cuda
        sizes = layout.shard_sizes
        # Host buffers: what goes on the wire (gradients) and what came off it (parameters).
        self.host_grads = [torch.zeros(n, pin_memory=pin) for n in sizes]
        self.host_params = [torch.zeros(n, pin_memory=pin) for n in sizes] if cuda else None
        self.dev_grads = [torch.zeros(n, device=self.device) for n in sizes] if cuda else None
        # Marks the end of the last host-to-device parameter copy, which reads host_params.
        self._h2d_done = torch.cuda.Event() if cuda else None
        # Per shard, where the client wants the next gradient (PSClient.gradient_buffers;
        # None: host_grads). Read at every step, since the client's segments can change.
        self.gradient_buffers: Callable[[], list[Optional[torch.Tensor]]] = lambda: [None] * len(sizes)
        n = len(self.params)
        self._spare: list[Optional[torch.Tensor]] = [None] * n  # stage()/swap_in(): the next parameters, off the model
        self._staged: list[Optional[torch.Tensor]] = [None] * n  # stage(): views of a reply slot to adopt
        self._adopted = [False] * n  # the parameter's storage is a reply slot (never reused as a spare)

    def _host_out(self) -> list[torch.Tensor]:
        """The host tensors the next gradients are written to."""
        if self.dev_grads is not None:  # CUDA: device-to-host copies go to the pinned buffers
            return self.host_grads
        return [b if b is not None else h for b, h in zip(self.gradient_buffers(), self.host_grads)]

    def load(self, shard_params: list[torch.Tensor]) -> None:
        """Copy pulled flat parameters (CPU, e.g. views of received frames) into the model."""
        for i, p in enumerate(self.params):
            if self._adopted[i]:  # a reply slot the shard writes again: the model takes its own storage back
                p.data, self._adopted[i] = torch.empty_like(p.data), False
        with torch.no_grad():
            if self.host_params is None:
                self.layout.unflatten(shard_params, self.params)
                return
            self._h2d_done.synchronize()  # never overwrite pinned buffers a pending copy still reads
            for buf, src in zip(self.host_params, shard_params):
                buf.copy_(src)
            self.layout.unflatten(self.host_params, self.params)  # non-blocking H2D from pinned memory
            self._h2d_done.record()

    def flat_params(self, out=None) -> list[torch.Tensor]:
        """The model's parameters as one flat float32 tensor per shard, on the model's device
        (into `out` when given)."""
        with torch.no_grad():
            return self.layout.flatten([p.detach() for p in self.params], out=out)

    def deltas_from(self, start: list[torch.Tensor]) -> list[torch.Tensor]:
        """start - current parameters as one flat float32 host tensor per shard: the
        `gradients` buffers, so a delta leaves exactly as a gradient does."""
        with torch.no_grad():
            out = self._host_out()
            work = out if self.dev_grads is None else self.dev_grads
            self.layout.flatten([p.detach() for p in self.params], out=work)
            for buf, begin in zip(work, start):
                torch.sub(begin, buf, out=buf)
            if self.dev_grads is None:
                return out
            for host, dev in zip(self.host_grads, self.dev_grads):
                host.copy_(dev, non_blocking=True)
            torch.cuda.synchronize(self.device)
            return self.host_grads

    def gradient_targets(self) -> list[torch.Tensor]:
        """The host tensors the next gradients go to (a shared-memory request region where the
        client offers one: fetching them starts a new payload there). For `shard_gradient`."""
        return self._host_out()

    def shard_gradient(self, shard: int, segments: slice = slice(None),
                       targets: Optional[list[torch.Tensor]] = None) -> torch.Tensor:
        """One shard's part of the model's gradients (of its `segments`: a piece) in
        its flat float32 host `gradients` buffer, for a push that leaves during backward.
        `targets`: `gradient_targets()` fetched once for all the pieces of one push."""
        # Only these parameters: the others' gradients may not exist yet (backward is running).
        segs = self.layout.segments[shard][segments]
        mine = {s.param for s in segs}
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)) if i in mine else None
                 for i, p in enumerate(self.params)]
        with torch.no_grad():
            if self.dev_grads is None:
                return self.layout.flatten_shard(grads, shard, (targets or self._host_out())[shard], segments)
            self.layout.flatten_shard(grads, shard, self.dev_grads[shard], segments)
            span = slice(segs[0].shard_offset, segs[-1].shard_offset + segs[-1].length) if segs else slice(0, 0)
            self.host_grads[shard][span].copy_(self.dev_grads[shard][span], non_blocking=True)
            torch.cuda.current_stream(self.device).synchronize()  # complete before it is sent
            return self.host_grads[shard]

    def take_gradients(self) -> list[Optional[torch.Tensor]]:
        """The model's gradient tensors, handed over: every `.grad` becomes None, as after
        `zero_grad()`, so the next backward writes fresh tensors and these stay unchanged
        while another thread flattens them (`gradients(taken)`)."""
        taken = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        return taken

    def stage(self, shard_params: list[torch.Tensor], adopt: Optional[list[bool]] = None) -> None:
        """Ready pulled flat parameters for `swap_in`, leaving the model untouched (it may be
        computing). CPU only. A shard marked in `adopt` replied in a slot of its segment that
        stays untouched until the reply after next (PSClient's reply_slots=2): each parameter
        it holds whole is taken as a view of it, no copy. The others are copied into spare
        tensors shaped like the model's."""
        if self.device.type != "cpu":
            raise ValueError("staged parameters are for CPU models: on CUDA use load()")
        chosen = [t if adopt is not None and adopt[s] else None for s, t in enumerate(shard_params)]
        views = self.layout.whole_views(chosen)
        self._staged = [v.view(p.shape) if v is not None and v.dtype == p.dtype else None
                        for v, p in zip(views, self.params)]
        for i, p in enumerate(self.params):
            if self._staged[i] is None and self._spare[i] is None:
                self._spare[i] = torch.empty_like(p, memory_format=torch.contiguous_format)
        with torch.no_grad():
            self.layout.unflatten(shard_params, [sp if v is None else None for sp, v in zip(self._spare, self._staged)])

    def swap_in(self) -> None:
        """The staged parameters become the model's: each parameter takes its reply-slot view,
        or trades storage with its spare (no copy either way; the parameter objects stay, so
        optimizers and hooks keep them). A slot is never kept as a spare: the shard writes it again."""
        for i, p in enumerate(self.params):
            old, was_slot = p.data, self._adopted[i]
            if self._staged[i] is not None:
                p.data, self._adopted[i] = self._staged[i], True
                if not was_slot and self._spare[i] is None:
                    self._spare[i] = old  # the model's own storage, kept for a reply that comes inline
            else:
                p.data, self._adopted[i] = self._spare[i], False
                self._spare[i] = None if was_slot else old
        self._staged = [None] * len(self.params)

    def gradients(self, taken: Optional[list[Optional[torch.Tensor]]] = None) -> list[torch.Tensor]:
        """The model's current gradients (or those `take_gradients` handed over) as one flat
        float32 host tensor per shard. The returned buffers are reused: send them before the next call."""
        source = [p.grad for p in self.params] if taken is None else taken
        grads = [g if g is not None else torch.zeros_like(p) for g, p in zip(source, self.params)]
        with torch.no_grad():
            if self.dev_grads is None:
                return self.layout.flatten(grads, out=self._host_out())
            self.layout.flatten(grads, out=self.dev_grads)
            for host, dev in zip(self.host_grads, self.dev_grads):
                host.copy_(dev, non_blocking=True)
            torch.cuda.synchronize(self.device)  # the host buffers must be complete before sending
            return self.host_grads
