"""What encoding and decoding a gradient costs, per fp32 byte, when `sim:` names no rate.

Figures measured once on the project's reference machine (one thread of an AMD
EPYC, psgd's own WireEncoder and the shard's decode, a 1M-element gradient,
median of 15), kept here so that no run depends on this machine. The shard's top-k
decode is its copy of indices and values; scattering them into the dense update
is part of the apply (sim.apply_gbytes_per_s).
"""
from __future__ import annotations

from typing import Optional

from psgd.wire.codecs import CODECS

__all__ = ["DEFAULT_RATES", "codec_rates"]

# wire encoding -> (encode, decode) gigabytes/s of fp32 gradient; None: free (f32 travels as it is).
DEFAULT_RATES: dict[str, tuple[Optional[float], Optional[float]]] = {
    "f32": (None, None),
    "f16": (6.6, 20.0),
    "bf16": (36.0, 28.0),
    "topk": (0.42, 29.0),
    # The block codecs: this project's 2-core machine, one thread, process time, same gradient and median.
    "int8": (0.52, 1.2),
    "int4": (0.40, 1.0),
    "int2ef": (0.30, 0.86),
}

if set(DEFAULT_RATES) != set(CODECS):  # a new codec needs its cost here (a check, not an assert: python -O)
    raise ImportError(f"psgd.sim.codec_cost: rates for {sorted(set(CODECS) ^ set(DEFAULT_RATES))} out of step "
                      "with psgd.wire.codecs")


def codec_rates(encoding: str, encode_gbytes_per_s: Optional[float],
                decode_gbytes_per_s: Optional[float]) -> tuple[Optional[float], Optional[float]]:
    """(encode, decode) bytes/s for `encoding`: the config's figure where it gives one.
    f32 is never encoded, so its rates stay None (free) whatever the config says."""
    encode, decode = DEFAULT_RATES[encoding]
    if encoding == "f32":
        return None, None
    encode = encode_gbytes_per_s if encode_gbytes_per_s is not None else encode
    decode = decode_gbytes_per_s if decode_gbytes_per_s is not None else decode
    return encode * 1e9, decode * 1e9
