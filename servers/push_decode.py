"""A push's gradient as the shard applies it: decoded from its frames, or copied
out of a same-host client's shared-memory segment, into buffers the shard reuses;
or assembled from the pieces a worker pushing during backward sent (one buffer
per rank that sends pieces, reused from push to push); or, for a shard pushed in
runs (psgd.wire.codecs.runs), decoded run by run into the fp32 buffer. A push in
runs never travels through shared memory nor in pieces: it is several payloads."""
from __future__ import annotations

from typing import Optional, Union

import torch

from psgd.wire import protocol as P
from psgd.wire.codecs import codec_named, dense_codec
from psgd.wire.codecs.runs import RUNS, Plan, decode_runs
from psgd.wire.protocol import ProtocolError
from psgd.wire.shm.links import ShardSegments

__all__ = ["PushDecoder"]


class PushDecoder:
    def __init__(self, numel: int, segments: ShardSegments, plan: Plan = ()):
        """`plan`: the runs this shard's pushes come in (one run, or none given: any single encoding)."""
        self.numel = numel
        self.plan = plan
        self._in_runs = len(plan) > 1  # several runs: every push comes inline in encoding 'runs'
        self._shm = segments
        self._f32: Optional[torch.Tensor] = None  # decoded fp16/bf16 and shared-memory gradients
        self._wire: dict[torch.dtype, torch.Tensor] = {}  # fp16/bf16 copied out of shared memory
        self._pieces: dict[int, _Assembly] = {}  # rank -> the push it is assembling

    def gradient(self, identity: bytes, rec: P.Push,
                 payload: list) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Dense fp32, or (indices, values) for a sparse push. Valid until the next call."""
        if rec.encoding == RUNS or self._in_runs:
            if self._in_runs and (rec.encoding != RUNS or rec.shm):
                raise ProtocolError(P.ErrorCode.BAD_ENCODING, f"this shard's pushes come in {len(self.plan)} runs "
                                    "inline (encoding 'runs'), as wire.compression.choose_by: tensor plans them")
            return decode_runs(self.plan, rec.runs, payload, self._f32_buffer)
        if rec.shm:
            return self._from_segment(identity, rec)
        # An fp32 payload decodes to a view of its frame; others into the shard's fp32 buffer.
        return codec_named(rec.encoding).decode(payload, rec.numel, rec.nnz, rec.scale, self._f32_buffer)

    def _from_segment(self, identity: bytes, rec: P.Push) -> torch.Tensor:
        """Copied once out of the client's segment into a buffer of the shard's own:
        what is checked, applied and logged is that copy, whatever the client
        writes into its memory meanwhile."""
        codec = dense_codec(rec.encoding)
        if codec is None:
            raise ProtocolError(P.ErrorCode.BAD_ENCODING, f"{rec.encoding!r} cannot travel through shared memory")
        dtype, f32 = codec.wire_dtype, self._f32_buffer
        if dtype == torch.float32:
            out = f32  # fp32: copied straight into the decode buffer
        else:
            out = self._wire.get(dtype)
            if out is None:
                out = self._wire[dtype] = torch.empty(self.numel, dtype=dtype)
        if rec.numel != out.numel() or not self._shm.request(identity, rec.shm, out):
            raise ProtocolError(P.ErrorCode.BAD_SHM, f"no shared-memory payload at generation {rec.shm} for this connection")
        return codec.to_f32(out, rec.scale, f32)

    @property
    def _f32_buffer(self) -> torch.Tensor:
        """The fp32 buffer decoded gradients land in, made on first use."""
        if self._f32 is None:
            self._f32 = torch.empty(self.numel)
        return self._f32

    def piece(self, rank: int, rec: P.Push, payload: list, identity: bytes = b"") -> Optional[torch.Tensor]:
        """Add one piece of rank's push `rec.seq` (a newer seq starts over); returns the
        whole fp32 gradient once the pieces cover it, else None. Valid until the rank's next piece.
        A piece inline is checked before anything is kept; an fp32 piece in `identity`'s segment
        (`rec.shm`) is copied straight to its place, and forgotten if the copy fails."""
        codec = dense_codec(rec.encoding)
        if codec is None or (rec.shm and codec.wire_dtype != torch.float32) or self._in_runs:
            raise ProtocolError(P.ErrorCode.BAD_ENCODING, "pieces are dense, fp32 in shared memory, and never "
                                "for a shard pushed in runs")
        if rec.offset < 0 or rec.numel < 1 or rec.offset + rec.numel > self.numel:
            raise ProtocolError(P.ErrorCode.BAD_SIZE, f"piece [{rec.offset}, {rec.offset + rec.numel}) outside "
                                f"the shard's {self.numel} elements")
        part = None if rec.shm else codec.view(payload[0], rec.numel)
        work = self._pieces.get(rank)
        if work is None:
            work = self._pieces[rank] = _Assembly(torch.empty(self.numel))
        if work.seq != rec.seq:
            work.seq, work.spans = rec.seq, {}
        view = work.grad[rec.offset:rec.offset + rec.numel]
        if part is None:
            if not self._shm.request(identity, rec.shm, view, at=4 * rec.offset):
                work.spans.pop(rec.offset, None)  # what the failed copy left there is no piece
                raise ProtocolError(P.ErrorCode.BAD_SHM, f"no shared-memory piece at generation {rec.shm} "
                                    "for this connection")
        else:
            view.copy_(part)
            if rec.scale != 1.0:
                view.mul_(rec.scale)
        work.spans[rec.offset] = rec.numel  # a piece sent again overwrites itself
        return work.grad if work.complete(self.numel) else None

    def forget(self, rank: int) -> None:
        """The rank left: its half-assembled push (if any) is dropped with its buffer."""
        self._pieces.pop(rank, None)


class _Assembly:
    def __init__(self, grad: torch.Tensor):
        self.grad, self.seq = grad, -1
        self.spans: dict[int, int] = {}  # offset -> numel of the pieces received for seq

    def complete(self, numel: int) -> bool:
        """The pieces tile [0, numel) exactly (overlapping pieces never do)."""
        end = 0
        for offset, n in sorted(self.spans.items()):
            if offset != end:
                return False
            end += n
        return end == numel
