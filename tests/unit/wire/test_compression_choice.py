"""wire.compression as a mapping: each shard's encoding chosen by its size and by
what the run pushes (gradients or local-update deltas); the plain string still
means one encoding for every shard. Mis-typed keys fail naming the key."""
import random

import pytest
import torch

from psgd.config import ConfigError, load_config
from psgd.wire.codecs import WireEncoder, encodings_for


def wire(*sets):
    return load_config(None, list(sets)).wire


def test_a_plain_string_is_one_encoding_for_every_shard():
    assert encodings_for(wire("wire.compression=int8"), [10, 10_000], local_updates=True) == ["int8", "int8"]
    assert encodings_for(wire(), [10], local_updates=False) == ["none"]


def test_small_shards_and_local_update_deltas_take_their_own_encoding():
    w = wire("wire.compression={default: fp16, small: none, small_below: 100, deltas: int8}")
    sizes = [99, 100, 5000]
    assert encodings_for(w, sizes, local_updates=False) == ["none", "fp16", "fp16"]
    assert encodings_for(w, sizes, local_updates=True) == ["none", "int8", "int8"]
    assert encodings_for(wire("wire.compression={default: int4}"), sizes, local_updates=True) == ["int4"] * 3


def test_an_encoder_with_one_codec_per_shard_encodes_each_shard_with_its_own():
    sizes = [50, 1000]
    enc = WireEncoder(["none", "int8"], sizes)
    g = [torch.randn(n) for n in sizes]
    first, second = enc.encode(0, g[0]), enc.encode(1, g[1])
    assert first.encoding == "none" and torch.equal(first.tensor, g[0])
    assert second.encoding == "int8" and len(second.frames) == 2
    assert enc.wire_bytes == 4 * 50 + 1000 + 4 * 16
    assert enc.encoding == "mixed" and not enc.elementwise
    with pytest.raises(ValueError, match="one codec per shard"):
        _ = enc.codec
    with pytest.raises(ValueError, match="2 encodings for 1 shards"):
        WireEncoder(["none", "int8"], [5])


@pytest.mark.parametrize("bad, message", [
    ("{default: int3}", "wire.compression.default: must be one of"),
    ("{small_below: -1}", "wire.compression.small_below: must be >= 0"),
    ("{small_below: many}", "wire.compression.small_below: expected an integer"),
    ("{deltas: zip}", "wire.compression.deltas: must be one of"),
    ("{replies: topk}", "wire.compression.replies: topk keeps a residual per receiver or sends only some coordinates"),
    ("{replies: int2_ef}", "wire.compression.replies: int2_ef keeps a residual per receiver or sends only some coordinates"),
    ("{replies: topk_int2}", "wire.compression.replies: topk_int2 keeps a residual per receiver or sends only some"),
    ("{replies: int3}", "wire.compression.replies: must be one of"),
    ("int3", "wire.compression"),
    # the words the wire used before each codec had one: the error names the word
    ("f16", "wire.compression: 'f16' is written 'fp16'$"),
    ("{default: int2ef}", "wire.compression.default: 'int2ef' is written 'int2_ef'$"),
    ("{replies: f32}", "wire.compression.replies: 'f32' is written 'none'$"),
])
def test_a_bad_choice_names_its_key(bad, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(None, [f"wire.compression={bad}"])
    assert "\n" not in str(info.value)


def test_random_mutations_of_the_choice_raise_only_config_errors():
    rng = random.Random(40)
    keys = ["default", "small", "small_below", "deltas"]
    values = ["int8", "int4", "int2_ef", "none", "fp16", "topk", "x", -3, 0, 4096, 1.5, None, True, [], {}]
    for _ in range(20):
        mapping = {k: rng.choice(values) for k in rng.sample(keys, rng.randint(1, len(keys)))}
        text = "{" + ", ".join(f"{k}: {v!r}".replace("'", "") for k, v in mapping.items()) + "}"
        try:
            w = load_config(None, [f"wire.compression={text}"]).wire
        except ConfigError as exc:
            assert "wire.compression" in str(exc) and "\n" not in str(exc)
        else:
            assert len(encodings_for(w, [10, 10_000], local_updates=True)) == 2
