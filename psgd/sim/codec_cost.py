"""What encoding and decoding a gradient costs the simulated cluster, per fp32 byte.

Each codec states its own CPU rates, with where they were measured
(`Codec.cost`, psgd.wire.codecs.base.CodecCost): that figure is used unless
`sim:` gives one, so no run depends on the machine it runs on.
"""
from __future__ import annotations

from typing import Optional

from psgd.wire.codecs import codec_named

__all__ = ["codec_rates"]


def codec_rates(encoding: str, encode_gbytes_per_s: Optional[float],
                decode_gbytes_per_s: Optional[float]) -> tuple[Optional[float], Optional[float]]:
    """(encode, decode) bytes/s for the codec whose word is `encoding`: the
    config's figure where it gives one, else the codec's own. A codec that costs
    no CPU (none: the fp32 gradient travels as it is) stays free, None, whatever the config says."""
    cost = codec_named(encoding).cost
    if cost is None:
        return None, None
    encode = encode_gbytes_per_s if encode_gbytes_per_s is not None else cost.encode_gbytes_per_s
    decode = decode_gbytes_per_s if decode_gbytes_per_s is not None else cost.decode_gbytes_per_s
    return encode * 1e9, decode * 1e9
