"""float16, scaled so the gradient's largest magnitude maps to FP16_RANGE: large
gradients do not overflow fp16's range. The scale comes from the whole gradient,
so it is not elementwise (it never travels in pieces). x / scale is rounded once to
fp16 (nearest), so |x - decode(encode(x))| <= |x| * 2**-10 + amax * 2**-34 (the second
term: values in fp16's subnormal range)."""
from __future__ import annotations

import torch

from psgd.wire.codecs.base import REFERENCE_EPYC, CodecCost, CodecOptions, DenseCodec, codec

FP16_RANGE = 1024.0  # the largest magnitude of a payload


@codec
class FP16(DenseCodec):
    name = "fp16"
    cost = CodecCost(encode_gbytes_per_s=6.6, decode_gbytes_per_s=20.0, measured_on=REFERENCE_EPYC)
    wire_dtype = torch.float16
    elementwise = False

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        x = x.reshape(-1).double().abs()
        return x * 2.0 ** -10 + (x.max() if x.numel() else 0.0) * 2.0 ** -34

    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        amax = float(grad.abs().max()) if grad.numel() else 0.0
        scale = amax / FP16_RANGE if 0 < amax < float("inf") else 1.0
        # Divided by a tensor on the gradient's device, not a Python number: CUDA multiplies by
        # the reciprocal of a number (one rounding more), a tensor it divides by as the CPU does.
        divisor = torch.tensor(scale, dtype=torch.float32, device=grad.device)
        if grad.device.type == "cpu":
            torch.div(grad, divisor, out=out)  # computed in fp32, rounded once to fp16
        else:
            out.copy_(torch.div(grad, divisor).to(torch.float16))  # the same roundings, half the bytes copied
        return out, scale
