"""One request of a psgd.workers.client.PSClient in flight, as its handle (ps-lite's
timestamp): a pull, a push or push+pull to every shard (whole, shard by shard, or in
pieces while backward runs), a fragment push (some shards, each with its own seq and
clock), or a stats call. It knows how to build each shard's message, again after a
re-registration (a push keeps its seq: a shard applies it once)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from psgd.wire import protocol as P
from psgd.wire.codecs import WireEncoder
from psgd.wire.requests import Pending
from psgd.wire.shm.links import ClientSegments, PayloadCache

__all__ = ["PushEncoding", "Request"]


@dataclass(frozen=True)
class PushEncoding:
    """What a push needs from its client to become messages: the rank it is sent as, the
    encoder, each shard's size, and the shared-memory segments a same-host shard's
    payload is written into (PSClient builds one; a request holds nothing else of it)."""
    rank: int
    encoder: WireEncoder
    shard_sizes: Sequence[int]
    segments: ClientSegments

    def payload_view(self, s: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
        """A `dtype` view of shard s's shared-memory request region, sized to its
        gradient, to encode a payload straight into; None without a segment."""
        seg = self.segments.segment(s)
        return seg.request_tensor(dtype, self.shard_sizes[s]) if seg is not None else None

    def encode(self, s: int, grad: torch.Tensor):
        """Shard s's whole gradient, checked and encoded."""
        if grad.numel() != self.shard_sizes[s] or grad.dtype != torch.float32:
            raise ValueError(f"shard {s} gradient must be float32 with {self.shard_sizes[s]} elements")
        # fp16/bf16 for a same-host shard: encoded straight into its request region (no copy to send it).
        dtype = self.encoder.wire_dtype(s)
        out = self.payload_view(s, dtype) if dtype not in (None, torch.float32) else None
        return self.encoder.encode(s, grad, out=out)

    def in_segment(self, s: int, wire, grad: torch.Tensor) -> bool:
        """An fp32 piece whose gradient lies in shard s's segment: the shard copies it from there."""
        seg = self.segments.segment(s)
        return wire.encoding == "none" and seg is not None and seg.holds(grad)


class Request:
    """A request in flight. `kind`: P.Pull, P.Push, P.PushPull or P.Stats; `shards`: the
    shards it addresses; `shard_cursors`: a fragment push's (seq, clock) per shard (None:
    `seq` and `clock` for all); `ahead`: a pull for clock + ahead; `slot`: the reply slot.
    A plain class with slots, its kind's answers worked out once: one is made per request."""

    __slots__ = ("kind", "shards", "encoding", "seq", "clock", "steps", "ahead", "read_versions", "slot", "step_s",
                 "shard_cursors", "pending", "wire", "whole", "pushes", "pulls", "bytes_before", "in_shm")

    def __init__(self, kind: type, shards: tuple[int, ...], encoding: PushEncoding, seq: int = 0, clock: int = 0,
                 steps: int = 1, ahead: int = 1, read_versions: Sequence[int] = (), slot: int = 0,
                 step_s: float = 0.0, shard_cursors: Optional[dict[int, tuple[int, int]]] = None):
        self.kind, self.shards, self.encoding = kind, shards, encoding
        self.seq, self.clock, self.steps, self.ahead = seq, clock, steps, ahead
        self.read_versions, self.slot, self.step_s, self.shard_cursors = read_versions, slot, step_s, shard_cursors
        self.pending: Optional[Pending] = None
        self.wire: dict[int, Any] = {}  # shard -> its encoded gradient
        self.whole: dict[int, torch.Tensor] = {}  # sent in pieces: encoded whole on a repeat
        self.pushes = kind is P.Push or kind is P.PushPull
        self.pulls = kind is P.Pull or kind is P.PushPull
        self.bytes_before = encoding.encoder.wire_bytes
        self.in_shm = PayloadCache(encoding.segments)  # dense payloads go to a same-host shard's segment, once

    def add_shard(self, s: int, grad: torch.Tensor) -> None:
        self.wire[s] = self.encoding.encode(s, grad)

    def make(self, s: int, req: int) -> list:
        """Shard s's message under request id `req` (a pushed shard's gradient added first)."""
        if self.kind is P.Pull:
            return P.encode(P.build(P.Pull, req=req, rank=self.encoding.rank, clock=self.clock))
        if self.kind is P.Stats:
            return P.encode(P.Stats(req=req))
        if s not in self.wire and s in self.whole:
            self.add_shard(s, self.whole[s])
        wire = self.wire[s]
        gen = self.in_shm.generation(s, wire.tensor) if wire.tensor is not None else 0
        return self._encode(s, req, wire, () if gen else wire.frames, self.encoding.shard_sizes[s], gen, wire.nnz)

    def piece(self, s: int, req: int, grad: torch.Tensor, offset: int, numel: int, last: bool) -> list:
        """The message of elements [offset, offset + numel) of shard s's gradient: its frame
        inline, or flattened into the segment's request region (published once per push;
        later pieces land beside pieces being read). `last`: the shard answers it."""
        wire = self.encoding.encoder.encode_piece(s, grad, offset, numel)
        gen = self.in_shm.generation(s, grad) if self.encoding.in_segment(s, wire, grad) else 0
        if last:
            self.whole[s] = grad  # a repeat after the shard restarted sends it in one message
        return self._encode(s, req, wire, () if gen else wire.frames, numel, gen, 0, offset, not last)

    def _encode(self, s: int, req: int, wire, frames, numel: int, shm: int, nnz: int, offset: int = 0,
                held: bool = False) -> list:
        seq, clock = self.shard_cursors[s] if self.shard_cursors is not None else (self.seq, self.clock)
        return P.encode_push(self.kind, frames, req, self.encoding.rank, seq, clock, self.read_versions[s],
                             wire.encoding, wire.scale, numel, nnz, shm, self.step_s, self.steps, offset, held,
                             wire.runs, self.ahead, self.slot)
