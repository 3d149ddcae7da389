"""Hiding communication behind computation (`workers.overlap`), the worker's side.

pipeline: step() sends this step's push+pull and returns at once; the next
  step's forward and backward run on the parameters the model already has
  while it travels, and the next step() collects its reply first. A gradient is
  then computed on parameters one reply older than without overlap (one more
  step of staleness, as hivemind's delay_optimizer_step), which the shards
  measure like any other: each push names the versions it was computed on. The
  pull asks for the clock after next, so SSP's bound holds for the step that
  will use it.
backward: a hook on every parameter counts, per piece of a shard's gradient,
  the parameters whose gradient backward has produced; a piece whose last one
  arrives leaves at once (Poseidon's wait-free backpropagation), so the last
  layers' traffic overlaps the first layers' compute. The shard applies the
  whole gradient when its last piece arrives: what it applies is unchanged.
Exactly-once, resends, compression with error feedback, shared memory and
re-registration after a shard restart work as for a blocking push: the same
request object is repeated (psgd.workers.request.Request).
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import torch

from psgd.workers.client import PSClient, Request
from psgd.workers.model_sync import ModelSync

__all__ = ["Pipeline", "BackwardPushes", "OverlapError", "plan_pieces"]


class OverlapError(RuntimeError):
    """The training loop does something the overlap mode cannot honour."""


class Pipeline:
    """The push in flight runs on a communication thread (encoding, the copy into a
    shared-memory segment, sending, waiting and decoding all release the GIL or are
    short), so it overlaps the next step's compute; the client is touched by that
    thread only between `step` calls, and by the caller's thread only inside them.
    On CPU the copies run there too: step() hands the gradient tensors over (`.grad`
    is None after it, as after zero_grad()) and the thread flattens them. The reply
    needs no copy where it came through shared memory: the client's segments hold two
    reply slots, pushes alternate between them, and the next step() makes each
    parameter a view of the slot that holds it (the shard writes the other slot
    meanwhile); parameters split over shards, and replies that came inline, are copied
    into spare tensors that step() swaps in. The training thread copies nothing. On
    CUDA the training thread's stream orders the copies, so it makes them itself."""

    def __init__(self, client: PSClient, sync: ModelSync):
        self.client, self.sync = client, sync
        self.pending: Optional[Future] = None
        self.model_versions = list(client.versions)  # the versions of the parameters the model holds
        self.off_thread = sync.device.type == "cpu"
        self._comm = ThreadPoolExecutor(max_workers=1, thread_name_prefix="psgd-push")
        self._slot = 0  # the reply slot of the next push (they alternate when the client has two)
        # The client's clock as the training thread last collected it. The client's own moves on the
        # communication thread the moment the push in flight finishes, so reading it from here races.
        self.clock = client.clock

    def _push(self, grads, read_versions) -> tuple[Optional[list[torch.Tensor]], list[int]]:
        if self.off_thread:
            grads = self.sync.gradients(grads)  # the taken tensors, flattened here
        slot, two = self._slot, self.client.reply_slots == 2
        request = self.client.start(grads, read_versions=read_versions, ahead=2, slot=slot)
        params = list(self.client.wait(request).values())
        if self.off_thread:
            # With two reply slots the model trains on this reply's slot while the next reply fills
            # the other one, so it takes the parameters as they lie there; else they are copied out
            # before the next request reuses the region.
            self.sync.stage(params, adopt=[two and shm for shm in self.client.reply_in_slot])
            params = None
            self._slot = 1 - slot if two else 0
        return params, list(self.client.versions)

    def _install(self, params: Optional[list[torch.Tensor]], versions: list[int]) -> None:
        if self.off_thread:
            self.sync.swap_in()
        else:
            self.sync.load(params)  # before the next request: a shared-memory reply region is reused
        self.model_versions = versions
        self.clock = self.client.clock  # exact: the push is collected and the next not yet sent

    def step(self) -> None:
        done = None
        if self.pending is not None:
            future, self.pending = self.pending, None
            done = future.result()
        # computed on the parameters the model holds now
        grads = self.sync.take_gradients() if self.off_thread else self.sync.gradients()
        read = self.model_versions
        if done is not None:
            self._install(*done)
        self.pending = self._comm.submit(self._push, grads, read)

    @property
    def in_flight(self) -> bool:
        """A push was sent that step() or drain() has not collected yet (its step is done)."""
        return self.pending is not None

    def drain(self) -> None:
        """Collect the push in flight (close, or a final evaluation of the model)."""
        if self.pending is not None:
            future, self.pending = self.pending, None
            self._install(*future.result())

    def close(self) -> None:
        self._comm.shutdown(wait=True)


PIECES_PER_SHARD = 8  # at most, each about an equal share of the shard


def plan_pieces(sizes: list[int], min_elements: int, pieces: int = PIECES_PER_SHARD) -> list[slice]:
    """Consecutive segments of one shard (their sizes in shard order) grouped into pieces of
    at least max(total / pieces, min_elements) elements, the last one perhaps less: slices of
    the shard's segment list."""
    least = max(sum(sizes) / pieces, min_elements)
    out, first, acc = [], 0, 0
    for i, n in enumerate(sizes):
        acc += n
        if acc >= least:
            out.append(slice(first, i + 1))
            first, acc = i + 1, 0
    if first < len(sizes):
        out.append(slice(first, len(sizes)))
    return out


class BackwardPushes:
    """Sends each shard's gradient in pieces as backward produces them: a piece is a
    run of the shard's segments and leaves once backward has produced every parameter
    it covers, so the pieces of the last layers travel while the first layers still
    compute (Poseidon's wait-free backpropagation, at the granularity of pieces rather
    than of shards: with parameters spread evenly over the shards, a shard's last
    parameter comes near the end of backward). The shard applies the whole gradient
    once, when its last piece arrives. Encodings whose bytes depend on the whole
    gradient (fp16's scale, top-k's choice) send each shard whole, when it is complete.
    A piece is flattened and sent on a thread, in order, so backward goes on meanwhile;
    step() waits for every send before it waits for the replies."""

    def __init__(self, client: PSClient, sync: ModelSync, piece_elements: int):
        self.client, self.sync = client, sync
        layout = sync.layout
        self.pieces: list[list[slice]] = []
        self.spans: list[list[tuple[int, int]]] = []  # per shard and piece: (offset, numel) in the shard
        self.pieces_of: list[list[tuple[int, int]]] = [[] for _ in sync.params]  # param -> (shard, piece)
        self.needed: list[list[int]] = []  # per shard and piece: the parameters it covers
        for s, segs in enumerate(layout.segments):
            plan = plan_pieces([g.length for g in segs], piece_elements) if client.encoder.elementwise else []
            plan = plan or [slice(0, len(segs))]  # whole (an empty shard too: its push still goes)
            self.pieces.append(plan)
            self.spans.append([(segs[k][0].shard_offset, sum(g.length for g in segs[k])) if segs[k] else (0, 0)
                               for k in plan])
            self.needed.append([])
            for k, piece in enumerate(plan):
                params = {g.param for g in segs[piece]}
                self.needed[s].append(len(params))
                for i in params:
                    self.pieces_of[i].append((s, k))
        self.request: Optional[Request] = None
        self._sends: list[Future] = []  # this step's pieces, flattened and sent in order on the thread
        self._comm = ThreadPoolExecutor(max_workers=1, thread_name_prefix="psgd-pieces")
        self._begin()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(sync.params)]

    def _begin(self) -> None:
        self.waiting = [list(n) for n in self.needed]  # per shard and piece: parameters not produced yet
        self.unsent = [len(p) for p in self.pieces]    # per shard: pieces not sent yet
        self.sent = [[False] * len(p) for p in self.pieces]
        self.seen: set[int] = set()
        self._targets: Optional[list[torch.Tensor]] = None  # where this push's pieces are flattened

    def _hook(self, index: int):
        def ready(_: torch.Tensor) -> None:
            if index in self.seen:
                raise OverlapError("workers.overlap: backward sends each shard's gradients when backward has "
                                   "produced them: call backward() once per step()")
            self.seen.add(index)
            for s, k in self.pieces_of[index]:
                self.waiting[s][k] -= 1
                if self.waiting[s][k] == 0:
                    self._send(s, k)
        return ready

    def _send(self, shard: int, k: int) -> None:
        """Hand piece k of `shard` to the thread: backward goes on while it is flattened and sent."""
        self.sent[shard][k] = True
        self.unsent[shard] -= 1
        self._sends.append(self._comm.submit(self._flatten_and_send, shard, k, self.unsent[shard] == 0))

    def _flatten_and_send(self, shard: int, k: int, last: bool) -> None:
        if self._targets is None:  # once a push: fetching them starts a payload in a segment
            self._targets = self.sync.gradient_targets()
        grad = self.sync.shard_gradient(shard, self.pieces[shard][k], self._targets)
        if self.request is None:
            self.request = self.client.start([None] * self.sync.layout.num_shards)
        if len(self.pieces[shard]) == 1:  # whole: it may travel through shared memory
            self.client.send(self.request, shard, grad)
        else:
            offset, numel = self.spans[shard][k]
            self.client.send(self.request, shard, grad, piece=(offset, numel), last=last)

    def step(self) -> None:
        """Send what backward did not (parameters without a gradient this step), then
        wait for the parameters of the next clock."""
        for s, sent in enumerate(self.sent):
            for k, done in enumerate(sent):
                if not done:
                    self._send(s, k)
        sends, self._sends = self._sends, []
        try:
            for f in sends:
                f.result()  # every piece sent (or its error raised here)
        finally:
            request, self.request = self.request, None
            self._begin()
        self.sync.load(list(self.client.wait(request).values()))

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._comm.shutdown(wait=True)
