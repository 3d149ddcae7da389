"""One push being assembled and sent (psgd.workers.client.PSClient): its seq and clock
(or, for a fragment push, each shard's own), each shard's encoded gradient, and how to
build a shard's request, again after a re-registration (the same seq: applied once)."""
from __future__ import annotations

from typing import Any, Optional

import torch

from psgd.wire import protocol as P
from psgd.wire.requests import Pending

__all__ = ["GradsRequest"]


class GradsRequest:
    """One push being assembled and sent: its seq and clock, each shard's encoded
    gradient, and how to build a shard's request (again, after a re-registration)."""

    def __init__(self, client: Any, kind, seq: int, clock: int, steps: int, ahead: int,
                 read_versions: list[int], slot: int = 0,
                 shard_cursors: Optional[dict[int, tuple[int, int]]] = None):
        """`client`: the PSClient (not imported: it imports this module). `shard_cursors`: a
        fragment push's (seq, clock) per shard (None: `seq` and `clock` for all)."""
        self.client, self.kind, self.seq, self.clock = client, kind, seq, clock
        self.shard_cursors = shard_cursors
        self.steps, self.ahead, self.read_versions, self.slot = steps, ahead, read_versions, slot
        self.bytes_before = client.encoder.wire_bytes
        self.wire: dict[int, Any] = {}
        self.in_shm = client.payload_cache()  # dense payloads go to a same-host shard's segment, once
        self.step_s = client.step_s()
        self.pending: Optional[Pending] = None
        self.whole: dict[int, torch.Tensor] = {}  # shards sent in pieces: the gradient, encoded whole on a repeat

    def add_shard(self, s: int, grad: torch.Tensor) -> None:
        if grad.numel() != self.client.layout.shard_sizes[s] or grad.dtype != torch.float32:
            raise ValueError(f"shard {s} gradient must be float32 with {self.client.layout.shard_sizes[s]} elements")
        enc = self.client.encoder
        # fp16/bf16 for a same-host shard: encoded straight into its request region (no copy to send it).
        dtype = enc.wire_dtype(s)
        out = self.client.payload_view(s, dtype) if dtype not in (None, torch.float32) else None
        self.wire[s] = enc.encode(s, grad, out=out)

    def make(self, s: int, req: int) -> list:
        if s not in self.wire and s in self.whole:
            self.add_shard(s, self.whole[s])
        wire, c = self.wire[s], self.client
        gen = self.in_shm.generation(s, wire.tensor) if wire.tensor is not None else 0
        return P.encode(self._record(s, req, wire, numel=c.layout.shard_sizes[s], nnz=wire.nnz, shm=gen),
                        () if gen else wire.frames)

    def piece(self, s: int, req: int, wire, offset: int, numel: int, held: bool, shm: int = 0) -> list:
        """A piece's message: its frame inline, or (`shm`, the generation) in the segment."""
        return P.encode(self._record(s, req, wire, numel=numel, offset=offset, held=held, shm=shm),
                        () if shm else wire.frames)

    def _record(self, s: int, req: int, wire, **fields) -> P.Push:
        if wire.runs:
            fields["runs"] = wire.runs
        if self.kind is P.PushPull:
            fields["ahead"], fields["slot"] = self.ahead, self.slot
        seq, clock = self.shard_cursors[s] if self.shard_cursors is not None else (self.seq, self.clock)
        return self.kind(req=req, rank=self.client.rank, seq=seq, clock=clock,
                         read_version=self.read_versions[s], encoding=wire.encoding, scale=wire.scale,
                         step_s=self.step_s, steps=self.steps, **fields)
