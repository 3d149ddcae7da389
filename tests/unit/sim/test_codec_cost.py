"""The simulator takes a codec's CPU cost from the codec's class (psgd.wire.codecs:
`cost`), unless the config gives a figure."""
from support.codecs import half_codec

from psgd.sim.codec_cost import codec_rates
from psgd.wire.codecs import CODECS, codec


def test_a_codecs_rates_come_from_its_class_unless_the_config_gives_one():
    codec(half_codec("half_for_cost"))
    try:
        assert codec_rates("half_for_cost", None, None) == (3e9, 5e9)
        assert codec_rates("half_for_cost", 0.5, None) == (0.5e9, 5e9)
        assert codec_rates("half_for_cost", None, 0.25) == (3e9, 0.25e9)
    finally:
        del CODECS["half_for_cost"]


def test_a_free_codec_stays_free_and_every_shipped_cost_says_where_it_was_measured():
    assert codec_rates("none", 0.5, 0.5) == (None, None)  # the gradient travels as it is
    for name, cls in CODECS.items():
        if cls.cost is not None:
            assert codec_rates(name, None, None) == (cls.cost.encode_gbytes_per_s * 1e9,
                                                     cls.cost.decode_gbytes_per_s * 1e9)
            assert cls.cost.measured_on, name
