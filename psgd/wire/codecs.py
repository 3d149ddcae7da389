"""Worker-side gradient encoding for the wire: fp32, scaled fp16/bf16, and
top-k sparsification with error feedback.

`WireEncoder` turns one flat float32 gradient per shard into the payload
frames of a push, reusing one buffer per shard across steps (nothing is
allocated per step for the dense encodings). Top-k keeps a residual per
shard: each step sends the k largest-magnitude coordinates of
gradient + residual, and the unsent part becomes the next residual, so
nothing is ever dropped, only delayed (Stich et al. 2018; Lin et al. 2018).
It counts the bytes it puts on the wire and what fp32 would have cost.
The returned frames alias the encoder's buffers: send them before the next
`encode` call. Not thread-safe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from psgd.wire import protocol as P
from psgd.wire.payload import sparse_frames, tensor_frame

__all__ = ["WireEncoder", "Encoded", "F16_RANGE", "topk_count"]

F16_RANGE = 1024.0  # f16 payloads are scaled so the largest magnitude maps here


def topk_count(numel: int, ratio: float) -> int:
    """Coordinates kept per step: ceil(ratio * numel), at least one (if any)."""
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


@dataclass(frozen=True)
class Encoded:
    frames: list            # payload frames for this shard's push
    encoding: str           # protocol encoding name
    scale: float = 1.0      # value = wire * scale (f16)
    nnz: int = 0            # sparse encodings: coordinates sent
    tensor: Optional[torch.Tensor] = None  # dense encodings: the payload the frame views


class WireEncoder:
    def __init__(self, encoding: str, shard_sizes: Sequence[int], topk_ratio: float = 0.01):
        if encoding not in P.ENCODINGS and encoding not in P.SPARSE_ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}")
        if encoding in P.SPARSE_ENCODINGS and not 0 < topk_ratio <= 1:
            raise ValueError(f"topk_ratio must be in (0, 1], got {topk_ratio}")
        self.encoding = encoding
        self.sizes = list(shard_sizes)
        self.ratio = topk_ratio
        self.wire_bytes = 0     # payload bytes encoded so far
        self.fp32_bytes = 0     # what the same gradients cost as fp32
        self._frames: dict[int, tuple] = {}  # shard -> (tensor, data_ptr, frame) of the last dense payload
        # The dense payload's dtype (None for top-k): an `out` given to `encode` must have it.
        self.wire_dtype = P.ENCODINGS[encoding][0] if encoding in P.ENCODINGS else None
        if encoding in ("f16", "bf16"):
            dtype = P.ENCODINGS[encoding][0]
            self._buffers = [torch.empty(n, dtype=dtype) for n in self.sizes]
        elif encoding == "topk":
            self.residuals = [torch.zeros(n) for n in self.sizes]
            self.k = [topk_count(n, topk_ratio) for n in self.sizes]

    @property
    def compression_ratio(self) -> float:
        """Wire bytes / fp32 bytes (0.5 for fp16); 1.0 before anything was sent."""
        return self.wire_bytes / self.fp32_bytes if self.fp32_bytes else 1.0

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        """Encode one shard's flat float32 gradient (not modified). fp16/bf16:
        into `out` (a `wire_dtype` tensor of the gradient's size, e.g. a
        shared-memory request region) instead of the encoder's own buffer."""
        if out is not None and (self.wire_dtype in (None, torch.float32) or out.dtype != self.wire_dtype
                                or out.numel() != grad.numel()):
            raise ValueError(f"an {self.encoding} payload cannot be encoded into a {out.dtype} tensor of {out.numel()}")
        encoded = self._encode(shard, grad, out)
        self.wire_bytes += sum(memoryview(f).nbytes for f in encoded.frames)
        self.fp32_bytes += 4 * grad.numel()
        return encoded

    def forget(self) -> None:
        """Let go of the last payloads (they may view memory the caller is releasing)."""
        self._frames.clear()

    @property
    def elementwise(self) -> bool:
        """Whether each element's encoding depends on that element alone (f32, bf16), so a
        gradient encoded piece by piece is the same bytes as encoded whole. f16's scale
        comes from the whole gradient, top-k's choice too: those leave whole."""
        return self.encoding in ("f32", "bf16")

    def encode_piece(self, shard: int, grad: torch.Tensor, offset: int, numel: int) -> Encoded:
        """Elements [offset, offset + numel) of one shard's flat float32 gradient, as
        `encode` would put them on the wire (elementwise encodings only)."""
        if not self.elementwise:
            raise ValueError(f"{self.encoding} gradients cannot be encoded piece by piece")
        piece = grad[offset:offset + numel]
        if self.encoding == "bf16":
            piece = self._buffers[shard][offset:offset + numel]
            piece.copy_(grad[offset:offset + numel])
        self.wire_bytes += piece.element_size() * numel
        self.fp32_bytes += 4 * numel
        return Encoded([tensor_frame(piece)], self.encoding)

    def _frame(self, shard: int, t: torch.Tensor):
        """The frame over `t`, the same object while `t` and its storage are the
        ones of the last call (workers reuse their gradient buffers), so the
        transport can keep reusing the message it built around it."""
        hit = self._frames.get(shard)
        if hit is None or hit[0] is not t or hit[1] != t.data_ptr():
            hit = self._frames[shard] = (t, t.data_ptr(), tensor_frame(t))
        return hit[2]

    def _encode(self, shard: int, g: torch.Tensor, out: Optional[torch.Tensor]) -> Encoded:
        if self.encoding == "f32":
            g = g.contiguous()
            return Encoded([self._frame(shard, g)], "f32", tensor=g)
        if self.encoding in ("bf16", "f16"):
            buf = self._buffers[shard] if out is None else out
        if self.encoding == "bf16":
            buf.copy_(g)
            return Encoded([self._frame(shard, buf)], "bf16", tensor=buf)
        if self.encoding == "f16":
            amax = float(g.abs().max()) if g.numel() else 0.0
            scale = amax / F16_RANGE if 0 < amax < float("inf") else 1.0
            torch.div(g, scale, out=buf)  # computed in fp32, rounded once to fp16
            return Encoded([self._frame(shard, buf)], "f16", scale=scale, tensor=buf)
        indices, values = self.topk(shard, g)
        return Encoded(sparse_frames(indices, values), "topk", nnz=indices.numel())

    def topk(self, shard: int, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Error feedback: acc = residual + g; send acc's k largest magnitudes;
        the residual becomes acc with those coordinates zeroed. Afterwards
        dense(sent) + residual == acc exactly."""
        acc = self.residuals[shard]
        acc.add_(g)
        k = self.k[shard]
        if k == 0:
            return torch.empty(0, dtype=torch.int32), torch.empty(0)
        idx = acc.abs().topk(k, sorted=False).indices
        values = acc[idx]
        acc.index_fill_(0, idx, 0.0)
        return idx.to(torch.int32), values
