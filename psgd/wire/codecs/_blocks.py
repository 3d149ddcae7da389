"""Block-scaled integer quantization, shared by the int8, int4 and int2_ef codecs.

A gradient of n elements is cut into blocks of BLOCK consecutive elements (the
last one shorter when BLOCK does not divide n). Each block b has one fp32 scale
s_b = amax_b / L, amax_b its largest finite magnitude and L = 2**(bits-1) - 1;
each element x becomes q = round(x / s_b) clamped to [-L, L], rounded to the
nearest integer (ties to even: deterministic, so a replay encodes the same bytes).
It travels as the code q + L + 1 (1 .. 2L+1) in `bits` bits, packed 8 / bits to a
byte, lowest bits first; code 0 marks a non-finite input element and decodes to
NaN, so the shard's non-finite check refuses the push as it would the fp32 one.

Error bound, per element of a block with largest magnitude amax (what the
codec tests check on every shape): |x - decode(encode(x))| <=
amax / (2L) + amax * 2**-21 + L * 2**-148. The first term is rounding to the
nearest step; the second covers fp32 rounding of the scale, of x / s and of
q * s (a few units in the last place of amax); the third, blocks whose scale
is a subnormal float (amax below about L * 2**-126), where fp32 has no
relative precision left.

Frames: the packed codes (uint8, ceil(n * bits / 8) bytes), then the scales
(fp32, ceil(n / BLOCK)). The push header's `scale` stays 1. All arithmetic uses
torch ops on the gradient's own device; only the packed frames come to the CPU.
"""
from __future__ import annotations

import functools
import math
from typing import Any, ClassVar, Optional, Sequence

import torch

from psgd.wire.codecs.base import Codec, CodecOptions, Encoded, Gradient
from psgd.wire.frames import tensor_frame, view_frame
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["BLOCK", "BlockCodec", "block_amax", "error_bound", "pack", "unpack", "quantize", "dequantize",
           "decode_blocks", "blocks_nbytes"]

BLOCK = 64  # elements per scale: 4 / 64 = 0.0625 bytes of scale per element


def levels(bits: int) -> int:
    """L: the largest |q| a `bits`-bit code holds (one code is kept for non-finite)."""
    return 2 ** (bits - 1) - 1


@functools.lru_cache(maxsize=None)
def max_scale(bits: int) -> torch.Tensor:
    """The largest fp32 scale s with L * s finite in fp32: a block's scale is capped
    there (its decoded values cannot overflow) and a larger one is forged."""
    top = levels(bits)
    s = torch.tensor(torch.finfo(torch.float32).max / top, dtype=torch.float32)
    while not torch.isfinite(s * top):
        s = torch.nextafter(s, torch.zeros(()))
    return s


def error_bound(amax: torch.Tensor, bits: int) -> torch.Tensor:
    """The largest |x - decode(encode(x))| for an element of a block whose largest magnitude is `amax`."""
    top = levels(bits)
    return amax.double() / (2 * top) + amax.double() * 2.0 ** -21 + top * 2.0 ** -148


def _blocks(numel: int) -> int:
    return math.ceil(numel / BLOCK)


def block_amax(x: torch.Tensor) -> torch.Tensor:
    """Each element's block's largest magnitude (float64, flat)."""
    n = x.numel()
    padded = torch.zeros(_blocks(n) * BLOCK, dtype=torch.float64, device=x.device)
    padded[:n] = x.reshape(-1).abs()
    return padded.view(-1, BLOCK).amax(dim=1).repeat_interleave(BLOCK)[:n]


def quantize(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes uint8 of x.numel(), scales fp32 per block) of a flat fp32 tensor, on its device."""
    n, top = x.numel(), levels(bits)
    padded = torch.zeros(_blocks(n) * BLOCK, dtype=torch.float32, device=x.device)
    padded[:n] = x
    blocks = padded.view(-1, BLOCK)
    finite = torch.isfinite(blocks)
    values = torch.where(finite, blocks, torch.zeros((), device=x.device))
    # Divided by a tensor, not a Python number: CUDA multiplies by the reciprocal of a number
    # (one rounding more), and would send other scales than the CPU.
    levels_t = torch.tensor(float(top), device=x.device)
    scales = torch.minimum(values.abs().amax(dim=1) / levels_t, max_scale(bits).to(x.device))
    safe = torch.where(scales > 0, scales, torch.ones((), device=x.device))
    q = torch.round(values / safe.unsqueeze(1)).clamp_(-top, top)
    codes = torch.where(finite, q + (top + 1), torch.zeros((), device=x.device)).to(torch.uint8)
    return codes.view(-1)[:n], scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, bits: int, out: torch.Tensor) -> torch.Tensor:
    """The fp32 values `codes` (uint8, one per element) and `scales` stand for, into `out`."""
    n, top = codes.numel(), levels(bits)
    if n == 0:
        return out
    steps = codes.to(torch.float32).sub_(top + 1)
    torch.mul(steps, scales.repeat_interleave(BLOCK)[:n], out=out)
    return out.masked_fill_(codes == 0, float("nan"))


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`bits`-bit codes, 8 // bits to a byte, the first in the lowest bits."""
    per = 8 // bits
    if per == 1:
        return codes
    n = codes.numel()
    padded = torch.zeros(math.ceil(n / per) * per, dtype=torch.uint8, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=codes.device)
    return (padded.view(-1, per) << shifts).sum(dim=1, dtype=torch.uint8)


def unpack(packed: torch.Tensor, bits: int, numel: int) -> torch.Tensor:
    """The first `numel` codes of `pack`'s bytes."""
    per = 8 // bits
    if per == 1:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    return ((packed.unsqueeze(1) >> shifts) & (2 ** bits - 1)).view(-1)[:numel]


def packed_nbytes(numel: int, bits: int) -> int:
    return math.ceil(numel * bits / 8)


def blocks_nbytes(numel: int, bits: int) -> int:
    """Payload bytes of `numel` values in `bits`-bit codes: the packed codes and one fp32 scale a block."""
    return packed_nbytes(numel, bits) + 4 * _blocks(numel)


class BlockCodec(Codec):
    """A block-scaled integer codec of `bits` bits (see the module docstring)."""

    bits: ClassVar[int]
    frames = 2
    wire_dtype = torch.uint8
    dense = False       # two frames: codes and scales (never through shared memory, never in pieces)
    elementwise = False
    error_feedback = False  # int2_ef's residual makes it True

    @classmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        return cls.bits / 8 + 4 / BLOCK

    @classmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        return error_bound(block_amax(x), cls.bits)

    @classmethod
    def wire_nbytes(cls, numel: int, nnz: int = 0) -> int:
        return blocks_nbytes(numel, cls.bits)

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        if out is not None:
            raise ValueError(f"a {self.name} payload cannot be encoded into a {out.dtype} tensor of {out.numel()}")
        codes, scales = self.codes(shard, grad.reshape(-1))
        packed = pack(codes, self.bits).cpu()
        scales = scales.cpu()
        return Encoded([tensor_frame(packed), tensor_frame(scales)], self.name)

    def codes(self, shard: int, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, scales) for one shard's flat fp32 gradient; error feedback codecs override it."""
        return quantize(grad, self.bits)

    @classmethod
    def decode(cls, frames: Sequence[Any], numel: int, nnz: int, scale: float,
               out: torch.Tensor) -> Gradient:
        """Checked before anything is written to `out`: two frames of the sizes `numel`
        implies, the header's scale 1, every block scale >= 0 and at most
        max_scale (finite, and no forged scale turns a code into an infinity)."""
        if len(frames) != 2:
            raise ProtocolError(ErrorCode.BAD_FRAMES,
                                f"{cls.name} gradient needs a code and a scale frame, got {len(frames)}")
        return decode_blocks(cls.name, cls.bits, frames, numel, scale, out)


def decode_blocks(name: str, bits: int, frames: Sequence[Any], numel: int, scale: float,
                  out: Optional[torch.Tensor]) -> torch.Tensor:
    """`numel` fp32 values from a code frame and a scale frame (frames[0], frames[1]) of
    `bits`-bit block codes, into `out` (or a new tensor), checked as BlockCodec.decode says."""
    if scale != 1.0:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"{name} carries its scales in its frame: header scale must be 1")
    packed = view_frame(frames[0], torch.uint8, packed_nbytes(numel, bits), "code")
    scales = view_frame(frames[1], torch.float32, _blocks(numel), "scale")
    if scales.numel() and not bool(((scales >= 0) & (scales <= max_scale(bits))).all()):  # NaN fails too
        raise ProtocolError(ErrorCode.BAD_VALUE, f"{name} block scales must be finite and >= 0, "
                            f"at most {float(max_scale(bits)):.6g}")
    out = torch.empty(numel) if out is None else out[:numel]  # the simulator passes none for a non-dense codec
    return dequantize(unpack(packed, bits, numel), scales, bits, out)
