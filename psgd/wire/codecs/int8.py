"""int8 with one fp32 scale per block of 64 elements, rounded to nearest:
1.0625 bytes per element (INTELLECT-1 sends its pseudo-gradients in int8).
Error per element <= amax/254 + amax * 2**-21 (+ a subnormal term): see
psgd.wire.codecs._blocks."""
from __future__ import annotations

from psgd.wire.codecs._blocks import BlockCodec
from psgd.wire.codecs.base import DEV_MACHINE, CodecCost, codec


@codec
class Int8(BlockCodec):
    name = "int8"
    bits = 8
    cost = CodecCost(encode_gbytes_per_s=0.52, decode_gbytes_per_s=1.2, measured_on=DEV_MACHINE)
