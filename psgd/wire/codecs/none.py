"""none: no compression, the fp32 gradient's own bytes, no copy (a copy to the host from a
device); exact."""
from __future__ import annotations

import torch

from psgd.wire.codecs.base import CodecOptions, DenseCodec, codec


@codec
class NoCompression(DenseCodec):
    name = "none"
    cost = None  # never encoded or decoded: the gradient travels as it is
    wire_dtype = torch.float32
    elementwise = True

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        return torch.zeros(x.numel(), dtype=torch.float64, device=x.device)

    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        if grad.is_cpu:  # a flag read, not a device object made (fill runs for every push)
            return (grad if grad.is_contiguous() else grad.contiguous()), 1.0
        return grad.cpu(), 1.0
