"""4-bit integers (-7..7) with one fp32 scale per block of 64 elements, rounded
to nearest, two to a byte: 0.5625 bytes per element (Streaming DiLoCo sends its
outer updates in 4 bits). Error per element <= amax/14 + amax * 2**-21 (+ a
subnormal term): see psgd.wire.codecs._blocks."""
from __future__ import annotations

from psgd.wire.codecs._blocks import BlockCodec
from psgd.wire.codecs.base import DEV_MACHINE, CodecCost, codec


@codec
class Int4(BlockCodec):
    name = "int4"
    bits = 4
    cost = CodecCost(encode_gbytes_per_s=0.40, decode_gbytes_per_s=1.0, measured_on=DEV_MACHINE)
