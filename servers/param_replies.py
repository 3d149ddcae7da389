"""How a shard sends parameters (a WELCOME's or a PARAMS reply's): the live tensor, copied by
the transport up to its copy limit and sent zero-copy above it, or the workers' reply encoding
(wire.compression.replies), each version encoded once; either goes through the client's
shared-memory segment where the reply record says it was written there."""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from psgd.config import Config
from psgd.wire import protocol as P
from psgd.wire.codecs import Encoded
from psgd.wire.payload import tensor_frame
from psgd.wire.replies import ReplyEncoder, reply_encoding
from psgd.wire.shm.links import ShardSegments
from psgd.wire.transport import ServerSocket

# isort: split
from psgd.servers.service import Answer
from psgd.servers.state import ShardState

__all__ = ["ParamReplies"]


class ParamReplies:
    def __init__(self, cfg: Config, state: ShardState, sock: ServerSocket, shm: ShardSegments):
        self.state, self._sock, self._shm = state, sock, shm
        self._numel = state.numel  # a pull's answer carries the whole shard: read on every one
        self._frame_of: Optional[torch.Tensor] = None  # the tensor `_frame` views (a reply frame)
        self._frame = None
        encoding = reply_encoding(cfg.wire)  # workers' pulls in it (none: the live tensor as it is)
        self._encoder = ReplyEncoder(encoding) if encoding != "none" else None

    def live(self, identity: bytes, record: P.Record, params: torch.Tensor) -> None:
        """Reply with the live parameters. The state keeps the send's tracker, so it does not
        update them in place while a zero-copy send still reads them."""
        if record.TYPE is P.MsgType.PARAMS and record.shm:  # already copied into the client's segment
            self._sock.send(identity, P.encode(record))
            return
        if self._frame_of is not params:  # the live tensor changes only on copy-on-write
            self._frame_of, self._frame = params, tensor_frame(params)
        self.state.sending(self._sock.send_tracked(identity, P.encode(record, [self._frame])))

    def encoded(self, params: torch.Tensor, version: int) -> Optional[Encoded]:
        """The parameters in the workers' reply encoding (None: fp32), each version encoded once."""
        if self._encoder is None:
            return None
        before = self._encoder.encode_s
        enc = self._encoder.encode(params, version)  # counts the codec's own time, not a cached version's
        self.state.counters["reply_encode_us"] += round(1e6 * (self._encoder.encode_s - before))
        return enc

    def send_encoded(self, identity: bytes, record: P.Record, enc: Encoded) -> None:
        """Reply with `enc`'s frames (tensors of their own, which no update touches), or none
        where they went through the client's segment."""
        record = dataclasses.replace(record, encoding=enc.encoding, scale=enc.scale)
        frames = () if isinstance(record, P.Params) and record.shm else enc.frames
        self._sock.send(identity, P.encode(record, frames))

    def answer(self, answer: Answer) -> None:
        """A worker's pull the service answered: its parameters as PARAMS, through the
        client's segment where it offered one (a dense payload only)."""
        identity, pull = answer.token
        snap = answer.params
        enc = self.encoded(snap, answer.version) if self._encoder is not None else None
        shared = snap if enc is None else enc.tensor
        record = P.build(P.Params, req=pull.req, version=answer.version, clock=answer.clock,
                         min_clock=answer.min_clock, numel=self._numel,
                         shm=shared is not None and self._shm.reply(identity, pull.req, shared, pull.slot),
                         fastest_step_s=answer.fastest_step_s, held_s=round(answer.held_s, 6) if answer.held_s else 0.0)
        if enc is None:
            self.live(identity, record, snap)
        else:
            self.send_encoded(identity, record, enc)
