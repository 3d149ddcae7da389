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

from typing import Any, Sequence

import torch

from psgd.wire.codecs._sparse import SparseCodec, largest, topk_count
from psgd.wire.codecs.base import REFERENCE_EPYC, CodecCost, CodecOptions, Encoded, codec
from psgd.wire.frames import tensor_frame, view_frame

__all__ = ["TopK", "topk_count"]


@codec
class TopK(SparseCodec):
    name = "topk"
    cost = CodecCost(encode_gbytes_per_s=0.42, decode_gbytes_per_s=29.0, measured_on=REFERENCE_EPYC)
    frames = 2
    frame_words = "an index and a value frame"
    wire_dtype = torch.float32
    error_feedback = True

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        super().__init__(sizes, options)
        self.residuals = [torch.zeros(n) for n in self.sizes]  # moved to a gradient's device at its first push

    @classmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        return 8 * options.topk_ratio  # an int32 index and an fp32 value per coordinate sent

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        magnitudes = x.reshape(-1).double().abs()
        k = topk_count(magnitudes.numel(), options.topk_ratio)
        kth = magnitudes.topk(k).values[-1] if k else torch.zeros((), dtype=torch.float64, device=x.device)
        return kth.expand(magnitudes.numel())

    def encode_sparse(self, shard: int, flat: torch.Tensor) -> Encoded:
        indices, values = self.select(shard, flat)
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
    def decode_values(cls, frames: Sequence[Any], nnz: int, scale: float) -> torch.Tensor:
        return view_frame(frames[0], cls.wire_dtype, nnz, "value")
