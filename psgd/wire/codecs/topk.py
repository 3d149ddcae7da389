"""Top-k sparsification with error feedback (Stich et al. 2018; Lin et al. 2018).

Each push sends the k largest-magnitude coordinates of gradient + residual, as
two frames (int32 indices in ascending order, then fp32 values); the unsent part
becomes the next residual, so nothing is ever dropped, only delayed. One residual
per shard, on the gradient's device. One push's error: the coordinates sent are
exact, the others are left whole, none larger than the k-th largest magnitude.
The indices are sorted so that every device sends the same bytes (torch's
unsorted top-k returns them in an order of its own); where magnitudes tie at the
k-th, which of them is sent is the device's choice."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from psgd.wire.codecs.base import REFERENCE_EPYC, Codec, CodecCost, CodecOptions, Encoded, Gradient, codec
from psgd.wire.frames import tensor_frame, view_frame
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["TopK", "topk_count", "largest", "check_indices"]


def topk_count(numel: int, ratio: float) -> int:
    """Coordinates kept per step: ceil(ratio * numel), at least one (if any)."""
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def largest(x: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of flat `x`'s k largest magnitudes, ascending (on x's device)."""
    return x.abs().topk(k, sorted=False).indices.sort().values


def check_indices(name: str, frame: Any, numel: int, nnz: int) -> torch.Tensor:
    """A sparse payload's index frame (int32, `nnz` of them, each in [0, numel)) as a tensor."""
    if not 0 <= nnz <= numel:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"nnz {nnz} outside 0..{numel}")
    indices = view_frame(frame, torch.int32, nnz, "index")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= numel):
        raise ProtocolError(ErrorCode.BAD_INDEX, f"{name} index outside 0..{numel - 1}")
    return indices


@codec
class TopK(Codec):
    name = "topk"
    cost = CodecCost(encode_gbytes_per_s=0.42, decode_gbytes_per_s=29.0, measured_on=REFERENCE_EPYC)
    frames = 2
    wire_dtype = torch.float32
    dense = False
    elementwise = False
    error_feedback = True
    sparse = True

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        if not 0 < options.topk_ratio <= 1:
            raise ValueError(f"topk_ratio must be in (0, 1], got {options.topk_ratio}")
        super().__init__(sizes, options)
        self.residuals = [torch.zeros(n) for n in self.sizes]  # moved to a gradient's device at its first push
        self.k = [topk_count(n, options.topk_ratio) for n in self.sizes]

    @classmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        return 8 * options.topk_ratio  # an int32 index and an fp32 value per coordinate sent

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        magnitudes = x.reshape(-1).double().abs()
        k = topk_count(magnitudes.numel(), options.topk_ratio)
        kth = magnitudes.topk(k).values[-1] if k else torch.zeros((), dtype=torch.float64, device=x.device)
        return kth.expand(magnitudes.numel())

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        if out is not None:
            raise ValueError(f"a {self.name} payload cannot be encoded into a {out.dtype} tensor of {out.numel()}")
        indices, values = self.select(shard, grad.reshape(-1))
        indices, values = indices.cpu(), values.cpu()
        return Encoded([tensor_frame(indices), tensor_frame(values)], self.name, nnz=indices.numel())

    def select(self, shard: int, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """acc = residual + g; send acc's k largest magnitudes; the residual
        becomes acc with those coordinates zeroed. Afterwards
        dense(sent) + residual == acc exactly. Both on g's device, indices ascending."""
        acc = self.residuals[shard]
        if acc.device != g.device:
            acc = self.residuals[shard] = acc.to(g.device)
        acc.add_(g)
        k = self.k[shard]
        if k == 0:
            return torch.empty(0, dtype=torch.int32, device=g.device), torch.empty(0, device=g.device)
        idx = largest(acc, k)
        values = acc[idx]
        acc.index_fill_(0, idx, 0.0)
        return idx.to(torch.int32), values

    @classmethod
    def decode(cls, frames: Sequence[Any], numel: int, nnz: int, scale: float,
               out: torch.Tensor) -> Gradient:
        """(indices, values) viewing the two frames; every index lies in [0, numel)."""
        if len(frames) != 2:
            raise ProtocolError(ErrorCode.BAD_FRAMES,
                                f"{cls.name} gradient needs an index and a value frame, got {len(frames)}")
        indices = check_indices(cls.name, frames[0], numel, nnz)
        return indices, view_frame(frames[1], cls.wire_dtype, nnz, "value")
