"""2-bit ternary codes (-1, 0, +1 times the block's largest magnitude, one fp32
scale per block of 64, rounded to nearest) with error feedback: 0.3125 bytes per
element. Each push sends acc = residual + gradient quantized; what it did not
send, acc - decode(sent), becomes the next residual, so over any number of pushes
the sum of what was sent plus the residual is the sum of the gradients (up to
fp32 rounding of the additions; the codec tests bound it). One residual per shard.
A push's own error is <= amax/2 (+ rounding): the residual carries it forward.
A gradient with a non-finite element is sent as such (the shard refuses the whole
push, as it refuses an fp32 one) and leaves the residual as it was: the refused
gradient is dropped whole, and what earlier pushes carried is not."""
from __future__ import annotations

from typing import Sequence

import torch

from psgd.wire.codecs._blocks import BlockCodec, dequantize, quantize
from psgd.wire.codecs.base import DEV_MACHINE, CodecCost, CodecOptions, codec


@codec
class Int2EF(BlockCodec):
    name = "int2_ef"
    bits = 2
    error_feedback = True
    cost = CodecCost(encode_gbytes_per_s=0.30, decode_gbytes_per_s=0.86, measured_on=DEV_MACHINE)

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        super().__init__(sizes, options)
        self.residuals: dict[int, torch.Tensor] = {}  # shard -> what earlier pushes did not send (on its device)

    def codes(self, shard: int, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        residual = self.residuals.get(shard)
        if residual is None:
            residual = self.residuals[shard] = torch.zeros(grad.numel(), dtype=torch.float32, device=grad.device)
        elif residual.device != grad.device:
            residual = self.residuals[shard] = residual.to(grad.device)
        if not bool(torch.isfinite(grad).all()):  # refused by the shard: nothing of it is sent
            return quantize(residual + grad, self.bits)
        residual.add_(grad)  # acc = residual + grad
        codes, scales = quantize(residual, self.bits)
        sent = dequantize(codes, scales, self.bits, torch.empty_like(residual))
        residual.sub_(sent).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        return codes, scales
