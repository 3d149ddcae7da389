"""The codec table: every member has every part, the config's values and the
codecs agree, and a codec lacking a part is refused when it is defined."""
import typing

import pytest
import torch
from support.codecs import half_codec

from psgd.config.operations import Compression
from psgd.wire import protocol as P
from psgd.wire.codecs import CODECS, Codec, CodecCost, CodecOptions, WireEncoder, codec
from psgd.wire.codecs.registry import check_codecs, codec_for_compression
from psgd.wire.payload import payload_frames


def test_every_config_word_selects_the_codec_of_that_name():
    values = typing.get_args(Compression)
    assert sorted(codec_for_compression(v).name for v in values) == sorted(values) == sorted(CODECS)
    assert {c.name for c in CODECS.values()} == set(CODECS)


@pytest.mark.parametrize("missing", ["name", "wire_dtype", "elementwise", "error_feedback", "sparse"])
def test_a_codec_lacking_an_attribute_is_refused(missing):
    cls = half_codec()
    setattr(cls, missing, None)
    with pytest.raises(TypeError, match=f"lacks {missing}"):
        codec(cls)
    assert cls not in CODECS.values()


def test_a_codec_lacking_its_cpu_cost_is_refused():
    cls = half_codec()
    del cls.cost
    with pytest.raises(TypeError, match="lacks cost"):
        codec(cls)
    cls.cost = (3.0, 5.0)  # rates without where they were measured
    with pytest.raises(TypeError, match="lacks cost"):
        codec(cls)
    assert cls not in CODECS.values()
    with pytest.raises(ValueError, match="where they were measured"):
        CodecCost(3.0, 5.0, "")


def test_a_codec_lacking_a_method_is_refused():
    class NoDecode(Codec):
        name, frames, wire_dtype, dense, elementwise = "nd", 1, torch.float32, True, False
        cost, error_feedback = None, False

        @classmethod
        def bytes_per_element(cls, options):
            return 4.0

        def encode(self, shard, grad, out=None):
            raise NotImplementedError
    with pytest.raises(TypeError, match="lacks decode"):
        codec(NoDecode)
    assert "nd" not in CODECS


def test_a_codec_reusing_a_name_is_refused():
    with pytest.raises(TypeError, match="reuses the name"):
        codec(half_codec(name="fp16"))
    with pytest.raises(TypeError, match="reuses the name"):
        codec(half_codec(name="none"))
    assert CODECS["fp16"].__name__ == "FP16" and CODECS["none"].__name__ == "NoCompression"


def test_config_values_and_codecs_must_agree():
    values = typing.get_args(Compression)
    check_codecs(CODECS, values)
    with pytest.raises(TypeError, match="with no codec: zstd"):
        check_codecs(CODECS, values + ("zstd",))
    with pytest.raises(TypeError, match="cannot select .*TopK"):
        check_codecs(CODECS, tuple(v for v in values if v != "topk"))


def test_a_registered_codec_is_used_from_encoder_to_decoder_and_frame_count():
    half = half_codec()
    codec(half)
    try:
        g = torch.tensor([0.5, -2.0, 3.25])
        enc = WireEncoder("half", [3]).encode(0, g)
        assert enc.encoding == "half" and payload_frames(P.Push(encoding="half", numel=3)) == 1
        out = torch.empty(3)
        assert torch.equal(CODECS["half"].decode(enc.frames, 3, 0, enc.scale, out), g)
        assert half.wire_nbytes(3) == 6 and half.bytes_per_element(CodecOptions()) == 2
    finally:
        del CODECS["half"]


def test_wire_cost_per_element_matches_the_bytes_encoded():
    # 1280: a whole number of top-k coordinates (64) and of 64-element scale blocks (20)
    n, options = 1280, CodecOptions(topk_ratio=0.05)
    for name, cls in CODECS.items():
        enc = WireEncoder(name, [n], topk_ratio=options.topk_ratio)
        enc.encode(0, torch.randn(n))
        assert enc.wire_bytes == cls.bytes_per_element(options) * n, name
