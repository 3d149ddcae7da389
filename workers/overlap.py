"""Hiding communication behind computation (`workers.overlap`), the worker's side.

pipeline: step() sends this step's push+pull and returns at once; the next
  step's forward and backward run on the parameters the model already has
  while it travels, and the next step() collects its reply first. A gradient is
  then computed on parameters one reply older than without overlap (one more
  step of staleness, as hivemind's delay_optimizer_step), which the shards
  measure like any other: each push names the versions it was computed on. The
  pull asks for the clock after next, so SSP's bound holds for the step that
  will use it.
backward: a hook on every parameter counts, per shard, the parameters whose
  gradient backward has produced; a shard whose last one arrives gets its part
  of the push at once (Poseidon's wait-free backpropagation), so the last
  layers' traffic overlaps the first layers' compute. What the shards apply is
  unchanged.
Exactly-once, resends, compression with error feedback, shared memory and
re-registration after a shard restart work as for a blocking push: the same
request object is repeated (psgd.workers.client.GradsRequest).
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import torch

from psgd.workers.client import GradsRequest, PSClient
from psgd.workers.model_sync import ModelSync

__all__ = ["Pipeline", "BackwardPushes", "OverlapError"]


class OverlapError(RuntimeError):
    """The training loop does something the overlap mode cannot honour."""


class Pipeline:
    """The push in flight runs on a communication thread (encoding, the copy into a
    shared-memory segment, sending, waiting and decoding all release the GIL or are
    short), so it overlaps the next step's compute; the client is touched by that
    thread only between `step` calls, and by the caller's thread only inside them."""

    def __init__(self, client: PSClient, sync: ModelSync):
        self.client, self.sync = client, sync
        self.pending: Optional[Future] = None
        self.model_versions = list(client.versions)  # the versions of the parameters the model holds
        self._comm = ThreadPoolExecutor(max_workers=1, thread_name_prefix="psgd-push")

    def _push(self, grads, read_versions) -> tuple[list[torch.Tensor], list[int]]:
        request = self.client.push_pull_start(grads, read_versions=read_versions, ahead=2)
        params = self.client.push_pull_finish(request)
        return params, list(self.client.versions)

    def step(self) -> None:
        params = versions = None
        if self.pending is not None:
            future, self.pending = self.pending, None
            params, versions = future.result()
        grads = self.sync.gradients()  # computed on the parameters the model holds now
        read = self.model_versions
        if params is not None:
            self.sync.load(params)  # before the next request: a shared-memory reply region is reused
            self.model_versions = versions
        self.pending = self._comm.submit(self._push, grads, read)

    def drain(self) -> None:
        """Collect the push in flight (close, or a final evaluation of the model)."""
        if self.pending is not None:
            future, self.pending = self.pending, None
            params, self.model_versions = future.result()
            self.sync.load(params)

    def close(self) -> None:
        self._comm.shutdown(wait=True)


class BackwardPushes:
    def __init__(self, client: PSClient, sync: ModelSync):
        self.client, self.sync = client, sync
        layout = sync.layout
        self.shards_of = [[s for s in range(layout.num_shards) if i in layout.params_of(s)]
                          for i in range(len(sync.params))]
        self.needed = [len(layout.params_of(s)) for s in range(layout.num_shards)]
        self.request: Optional[GradsRequest] = None
        self._begin()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(sync.params)]

    def _begin(self) -> None:
        self.waiting = list(self.needed)    # per shard: parameters whose gradient has not arrived
        self.seen: set[int] = set()

    def _hook(self, index: int):
        def ready(_: torch.Tensor) -> None:
            if index in self.seen:
                raise OverlapError("workers.overlap: backward sends each shard's gradients when backward has "
                                   "produced them: call backward() once per step()")
            self.seen.add(index)
            for s in self.shards_of[index]:
                self.waiting[s] -= 1
                if self.waiting[s] == 0:
                    self._send(s)
        return ready

    def _send(self, shard: int) -> None:
        grad = self.sync.shard_gradient(shard)
        if self.request is None:
            parts = [None] * self.sync.layout.num_shards
            parts[shard] = grad
            self.request = self.client.push_pull_start(parts)
        else:
            self.client.push_pull_send(self.request, shard, grad)

    def step(self) -> None:
        """Send what backward did not (parameters without a gradient this step), then
        wait for the parameters of the next clock."""
        for s, left in enumerate(self.waiting):
            if left:
                self._send(s)
        request, self.request = self.request, None
        self._begin()
        self.sync.load(self.client.push_pull_finish(request))

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
