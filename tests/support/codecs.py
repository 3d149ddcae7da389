"""A small codec for the registry's tests: fp16 without scaling, a fresh class each call
(register it with `@codec` and remove it from CODECS afterwards)."""
import torch

from psgd.wire.codecs import CodecCost, DenseCodec


def half_codec(name: str = "half") -> type[DenseCodec]:
    class Half(DenseCodec):
        wire_dtype = torch.float16
        elementwise = True
        cost = CodecCost(encode_gbytes_per_s=3.0, decode_gbytes_per_s=5.0, measured_on="a test")

        @classmethod
        def round_trip_bound(cls, x, options):  # for |x| within fp16's range
            return x.reshape(-1).double().abs() * 2.0 ** -11 + 2.0 ** -25

        def fill(self, grad, out):
            out.copy_(grad)
            return out, 1.0
    Half.name = name
    return Half
