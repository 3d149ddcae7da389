"""A push's gradient as the shard applies it: decoded from its frames, or copied
out of a same-host client's shared-memory segment, into buffers the shard reuses."""
from __future__ import annotations

from typing import Optional, Union

import torch

from psgd.wire import protocol as P
from psgd.wire.payload import frame_to_tensor, frames_to_sparse
from psgd.wire.protocol import ProtocolError
from psgd.wire.shm_links import ShardSegments

__all__ = ["PushDecoder"]


class PushDecoder:
    def __init__(self, numel: int, segments: ShardSegments):
        self.numel = numel
        self._shm = segments
        self._f32: Optional[torch.Tensor] = None  # decoded fp16/bf16 and shared-memory gradients
        self._wire: dict[torch.dtype, torch.Tensor] = {}  # fp16/bf16 copied out of shared memory

    def gradient(self, identity: bytes, rec: P.Push,
                 payload: list) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Dense fp32, or (indices, values) for a sparse push. Valid until the next call."""
        if rec.shm:
            return self._from_segment(identity, rec)
        if rec.encoding in P.SPARSE_ENCODINGS:
            return frames_to_sparse(payload, rec.encoding, rec.numel, rec.nnz)
        grad = frame_to_tensor(payload[0], rec.encoding, rec.numel)
        return grad if grad.dtype == torch.float32 else self._to_f32(grad, rec.scale)

    def _from_segment(self, identity: bytes, rec: P.Push) -> torch.Tensor:
        """Copied once out of the client's segment into a buffer of the shard's own:
        what is checked, applied and logged is that copy, whatever the client
        writes into its memory meanwhile."""
        if rec.encoding not in P.ENCODINGS:
            raise ProtocolError(P.ErrorCode.BAD_ENCODING, f"{rec.encoding!r} cannot travel through shared memory")
        dtype = P.ENCODINGS[rec.encoding][0]
        if dtype == torch.float32:
            out = self._f32_buffer()  # fp32: copied straight into the decode buffer
        else:
            out = self._wire.get(dtype)
            if out is None:
                out = self._wire[dtype] = torch.empty(self.numel, dtype=dtype)
        if rec.numel != out.numel() or not self._shm.request(identity, rec.shm, out):
            raise ProtocolError(P.ErrorCode.BAD_SHM, f"no shared-memory payload at generation {rec.shm} for this connection")
        return out if dtype == torch.float32 else self._to_f32(out, rec.scale)

    def _f32_buffer(self) -> torch.Tensor:
        if self._f32 is None:
            self._f32 = torch.empty(self.numel)
        return self._f32

    def _to_f32(self, wire: torch.Tensor, scale: float) -> torch.Tensor:
        f32 = self._f32_buffer()
        f32.copy_(wire)
        return f32.mul_(scale) if scale != 1.0 else f32
