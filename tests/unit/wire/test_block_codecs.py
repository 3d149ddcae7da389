"""The block-scaled integer codecs (int8, int4, int2_ef): the round trip within the
error bound their docstring states on every shape, exact wire sizes, error
feedback that loses nothing, and decoders that refuse forged payloads."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from psgd.wire.codecs import CODECS, CodecOptions, WireEncoder, codec_named
from psgd.wire.codecs._blocks import BLOCK, levels, max_scale
from psgd.wire.protocol import ProtocolError

BLOCK_CODECS = ["int8", "int4", "int2_ef"]
FINITE = st.floats(width=32, allow_nan=False, allow_infinity=False)
# Any length: empty, shorter than a block, not a multiple of it, several blocks.
GRADIENTS = st.integers(0, 5 * BLOCK + 3).flatmap(lambda n: arrays(np.float32, n, elements=FINITE))


def round_trip(name: str, x: torch.Tensor) -> torch.Tensor:
    c = codec_named(name)
    encoded = c([x.numel()], CodecOptions()).encode(0, x)
    return c.decode(encoded.frames, x.numel(), encoded.nnz, encoded.scale, torch.empty(x.numel()))


@pytest.mark.parametrize("name", BLOCK_CODECS)
@settings(max_examples=150, deadline=None)
@given(values=GRADIENTS)
def test_round_trip_error_is_within_the_stated_bound_on_every_shape(name, values):
    x = torch.from_numpy(values.copy())
    y = round_trip(name, x)
    assert y.shape == x.shape and bool(torch.isfinite(y).all())
    err = (x.double() - y.double()).abs()
    assert bool((err <= codec_named(name).round_trip_bound(x, CodecOptions())).all())


@pytest.mark.parametrize("name", BLOCK_CODECS)
def test_any_tensor_shape_encodes_as_its_flat_elements(name):
    x = torch.randn(3, 5, 7)
    assert torch.equal(round_trip(name, x.reshape(-1)), round_trip(name, x.contiguous().reshape(-1)))
    c = codec_named(name)([x.numel()], CodecOptions())
    encoded = c.encode(0, x)  # not flat: encoded as its elements in C order
    flat = c.decode(encoded.frames, x.numel(), 0, 1.0, torch.empty(x.numel()))
    assert flat.numel() == x.numel()


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_values_on_the_grid_survive_exactly(name):
    # amax / L * k for integers k is what the codec can say exactly: it must.
    top = levels(codec_named(name).bits)
    k = torch.arange(-top, top + 1, dtype=torch.float32)
    x = torch.cat([k, k.flip(0)])[:BLOCK] * (2.0 / top)
    x[0] = -2.0  # the block's amax, so the step is 2 / top
    assert torch.equal(round_trip(name, x), x)


@pytest.mark.parametrize("name", BLOCK_CODECS)
def test_non_finite_elements_decode_to_nan_so_the_shard_refuses_the_push(name):
    x = torch.randn(100)
    x[3], x[70] = float("inf"), float("nan")
    y = round_trip(name, x)
    assert math.isnan(y[3]) and math.isnan(y[70])
    finite = torch.ones(100, dtype=torch.bool)
    finite[[3, 70]] = False
    assert bool(torch.isfinite(y[finite]).all())


@pytest.mark.parametrize("name", BLOCK_CODECS)
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_wire_bytes_are_exact(name, n):
    enc = WireEncoder(name, [n])
    out = enc.encode(0, torch.randn(n))
    bits = codec_named(name).bits
    expected = [math.ceil(n * bits / 8), 4 * math.ceil(n / BLOCK)]
    assert [memoryview(f).nbytes for f in out.frames] == expected
    assert enc.wire_bytes == sum(expected) == CODECS[name].wire_nbytes(n)


def test_error_feedback_loses_nothing_over_many_steps():
    # sent_t + residual_t = residual_{t-1} + g_t, each push, except for the one fp32 rounding of
    # that addition (residual - sent is exact: Sterbenz, |sent| and |acc| within a factor 2, or
    # sent = 0). So |sum(sent) + residual - sum(g)| <= sum over steps of 2**-24 * |acc_t|,
    # which the test accumulates as it goes; the sums themselves are taken in float64.
    gen = torch.Generator().manual_seed(3)
    n, steps = 1000, 300
    enc = WireEncoder("int2_ef", [n])
    codec = enc.codec
    total, sent, slack = (torch.zeros(n, dtype=torch.float64) for _ in range(3))
    for _ in range(steps):
        g = torch.randn(n, generator=gen) * torch.rand(n, generator=gen) ** 4  # magnitudes over decades
        before = codec.residuals.get(0, torch.zeros(n)).clone()
        encoded = enc.encode(0, g)
        slack += 2.0 ** -24 * (before + g).double().abs()
        total += g.double()
        sent += codec.decode(encoded.frames, n, 0, 1.0, torch.empty(n)).double()
    gap = (sent + codec.residuals[0].double() - total).abs()
    assert bool((gap <= slack).all())
    assert float(codec.residuals[0].abs().max()) > 0  # something was carried, so the test says something


def test_a_push_refused_as_non_finite_leaves_the_residual_as_it_was():
    """The shard refuses the whole push (a non-finite element), as it would an fp32 one: the
    refused gradient is dropped whole, and the residual the earlier pushes left (error
    feedback's state) is carried on intact, not zeroed where the bad elements were nor
    reduced by the finite part that was never applied."""
    gen = torch.Generator().manual_seed(5)
    n = 200
    enc = WireEncoder("int2_ef", [n])
    enc.encode(0, torch.randn(n, generator=gen))
    carried = enc.codec.residuals[0].clone()
    assert float(carried.abs().max()) > 0
    bad = torch.randn(n, generator=gen)
    bad[7], bad[150] = float("nan"), float("inf")
    out = enc.encode(0, bad)
    decoded = enc.codec.decode(out.frames, n, 0, 1.0, torch.empty(n))
    assert not bool(torch.isfinite(decoded).all())  # what the shard refuses
    assert torch.equal(enc.codec.residuals[0], carried)
    # And error feedback goes on from there: the next push sends residual + g.
    g = torch.randn(n, generator=gen)
    again = WireEncoder("int2_ef", [n])
    again.codec.residuals[0] = carried.clone()
    assert [bytes(f) for f in enc.encode(0, g).frames] == [bytes(f) for f in again.encode(0, g).frames]
    assert torch.equal(enc.codec.residuals[0], again.codec.residuals[0])


def forge(name, n, codes=None, scales=None):
    c = codec_named(name)
    encoded = c([n], CodecOptions()).encode(0, torch.randn(n))
    frames = list(encoded.frames)
    if codes is not None:
        frames[0] = codes
    if scales is not None:
        frames[1] = scales
    return c, frames


@pytest.mark.parametrize("name", BLOCK_CODECS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "above"])
def test_a_forged_or_non_finite_scale_is_refused(name, bad):
    scales = torch.ones(2)
    # "above": the next float past the largest scale whose codes decode finite
    cap = max_scale(codec_named(name).bits)
    scales[1] = torch.nextafter(cap, torch.tensor(float("inf"))) if bad == "above" else bad
    c, frames = forge(name, 100, scales=memoryview(scales.numpy()).cast("B"))
    with pytest.raises(ProtocolError, match="scales must be finite"):
        c.decode(frames, 100, 0, 1.0, torch.empty(100))


@pytest.mark.parametrize("name", BLOCK_CODECS)
def test_frames_of_the_wrong_length_are_refused(name):
    c, frames = forge(name, 100)
    with pytest.raises(ProtocolError, match="code frame"):
        c.decode([bytes(memoryview(frames[0]))[:-1], frames[1]], 100, 0, 1.0, torch.empty(100))
    with pytest.raises(ProtocolError, match="scale frame"):
        c.decode([frames[0], bytes(memoryview(frames[1])) + b"\0\0\0\0"], 100, 0, 1.0, torch.empty(100))
    with pytest.raises(ProtocolError, match="frame"):
        c.decode(frames, 101, 0, 1.0, torch.empty(101))  # the header's numel disagrees with the frames
    with pytest.raises(ProtocolError, match="header scale"):
        c.decode(frames, 100, 0, 2.0, torch.empty(100))
    with pytest.raises(ProtocolError, match="code and a scale frame"):
        c.decode(frames[:1], 100, 0, 1.0, torch.empty(100))


@pytest.mark.parametrize("name", BLOCK_CODECS)
def test_the_simulator_decodes_a_quantized_push_as_the_shard_does(name):
    from psgd.sim.messages import decode_push
    x = torch.randn(300)
    encoded = WireEncoder(name, [300]).encode(0, x)
    assert torch.equal(decode_push(encoded, 300), codec_named(name).decode(encoded.frames, 300, 0, 1.0,
                                                                            torch.empty(300)))
