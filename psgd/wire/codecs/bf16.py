"""bfloat16: each value rounded to 8 mantissa bits; fp32's range, so no scale."""
from __future__ import annotations

import torch

from psgd.wire.codecs.base import DenseCodec, codec


@codec
class BF16(DenseCodec):
    name = "bf16"
    config_name = "bf16"
    wire_dtype = torch.bfloat16
    elementwise = True

    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        out.copy_(grad)
        return out, 1.0
