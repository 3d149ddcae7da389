"""Gradient codecs: one module per codec (none, fp16, bf16, topk, ...), each one
class with its word (the `wire.compression` value, the protocol's `encoding`, the
bench's `+` suffix), frames, dtype, wire and CPU cost, encode and decode (psgd.wire.codecs.base.Codec), in one table checked at import
(psgd.wire.codecs.registry). A new codec is a new module here."""
from psgd.wire.codecs.base import CODECS, Codec, CodecCost, CodecOptions, DenseCodec, Encoded, Gradient, codec
from psgd.wire.codecs.encoder import WireEncoder
from psgd.wire.codecs.fp16 import FP16_RANGE
from psgd.wire.codecs.registry import codec_for_compression, codec_named, dense_codec, encodings_for
from psgd.wire.codecs.topk import topk_count

__all__ = ["CODECS", "Codec", "CodecCost", "CodecOptions", "DenseCodec", "Encoded", "Gradient", "codec", "WireEncoder",
           "FP16_RANGE", "codec_for_compression", "codec_named", "dense_codec", "encodings_for",
           "topk_count"]
