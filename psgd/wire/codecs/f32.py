"""fp32: the gradient's own bytes, no copy."""
from __future__ import annotations

import torch

from psgd.wire.codecs.base import DenseCodec, codec


@codec
class F32(DenseCodec):
    name = "f32"
    config_name = "none"
    cost = None  # never encoded or decoded: the gradient travels as it is
    wire_dtype = torch.float32
    elementwise = True

    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        return grad.contiguous(), 1.0
