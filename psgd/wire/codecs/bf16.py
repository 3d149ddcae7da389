"""bfloat16: each value rounded to 8 mantissa bits (nearest); fp32's range, so no scale:
|x - decode(encode(x))| <= |x| * 2**-8 + 2**-133 (the second term: fp32 subnormals)."""
from __future__ import annotations

import torch

from psgd.wire.codecs.base import REFERENCE_EPYC, CodecCost, CodecOptions, DenseCodec, codec


@codec
class BF16(DenseCodec):
    name = "bf16"
    cost = CodecCost(encode_gbytes_per_s=36.0, decode_gbytes_per_s=28.0, measured_on=REFERENCE_EPYC)
    wire_dtype = torch.bfloat16
    elementwise = True

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        return x.reshape(-1).double().abs() * 2.0 ** -8 + 2.0 ** -133

    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        out.copy_(grad)  # from a device too: rounding to nearest even is the same everywhere
        return out, 1.0
