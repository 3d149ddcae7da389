"""Parameters in replies, encoded by role (`wire.compression.replies`).

A shard answers a worker's pulls, and its registration, with its parameters in the
reply encoding: fp32 (the default: the live tensor itself, as always), or a codec
that keeps no state (fp16, bf16, int8, int4; an error-feedback codec would need a
residual per receiver). It encodes each version once, however many workers read it
(`ReplyEncoder`); the worker decodes into a buffer of its own (`decode_reply`),
refusing a reply whose frames, scale or values are malformed instead of loading
it. The evaluator's registration and pulls carry fp32 (it scores, and saves, the
exact parameters). A real run and the simulator count a reply's bytes with one
rule (`reply_nbytes`).
"""
from __future__ import annotations

import math
import time
from typing import Any, Optional, Sequence

import torch

from psgd.config.operations import WireConfig
from psgd.wire.codecs import CodecOptions, Encoded, codec_for_compression, codec_named
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["ReplyEncoder", "ReplyDecoder", "decode_reply", "reply_encoding", "reply_nbytes"]


def reply_encoding(wire: WireConfig) -> str:
    """The word of the codec the parameters in replies to workers' pulls travel in."""
    return codec_for_compression(wire.reply_compression).name


def reply_nbytes(encoding: str, numel: int) -> int:
    """Payload bytes of a reply of `numel` parameters in `encoding` (headers excluded):
    what a worker counts as pulled, on a real run and in the simulator."""
    return codec_named(encoding).wire_nbytes(numel)


class ReplyEncoder:
    """A shard's reply encoding: each version's parameters encoded once, into tensors
    of their own (a reply still being sent keeps them; the next version gets new ones)."""

    def __init__(self, encoding: str):
        codec = codec_named(encoding)
        if codec.error_feedback:
            raise ValueError(f"{encoding} keeps a residual per receiver: it cannot encode replies")
        if codec.dense and codec.wire_dtype == torch.float32:
            raise ValueError("fp32 replies are the live parameters themselves: nothing to encode")
        self.encoding = encoding
        self._codec = codec([0], CodecOptions())
        self._last: Optional[tuple[int, Encoded]] = None  # (version, its encoded parameters)
        self.encode_s = 0.0  # the codec's own time on this shard
        self.encoded = 0     # versions encoded

    def encode(self, params: torch.Tensor, version: int) -> Encoded:
        """`params` (the shard's flat fp32 parameters at `version`) in the reply encoding."""
        if self._last is not None and self._last[0] == version:
            return self._last[1]
        start = time.perf_counter()
        codec = self._codec
        out = torch.empty(params.numel(), dtype=codec.wire_dtype) if codec.dense else None
        encoded = codec.encode(0, params, out)
        self.encode_s += time.perf_counter() - start
        self.encoded += 1
        self._last = (version, encoded)
        return encoded


def decode_reply(encoding: str, numel: int, scale: float, out: torch.Tensor,
                 frames: Optional[Sequence[Any]] = None, wire: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The fp32 parameters an encoded (not fp32) reply carries, written into `out` (fp32,
    `numel` elements): from its `frames`, or from `wire`, a dense payload read out of
    shared memory. Raises ProtocolError, before anything is loaded, for an encoding that
    cannot carry parameters, the wrong frames or sizes, a scale that is not finite and
    positive, or a value that decodes to a non-finite parameter."""
    codec = codec_named(encoding)
    if codec.error_feedback or (codec.dense and codec.wire_dtype == torch.float32):
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"{encoding} is not an encoding of replies")
    if codec.dense and not (math.isfinite(scale) and scale > 0):
        raise ProtocolError(ErrorCode.BAD_VALUE, f"{encoding} reply scale must be finite and > 0, got {scale!r}")
    if out.numel() != numel:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"reply of {numel} parameters for a shard of {out.numel()}")
    if wire is not None:
        if not codec.dense or wire.dtype != codec.wire_dtype or wire.numel() != numel:
            raise ProtocolError(ErrorCode.BAD_SIZE, f"{encoding} reply in shared memory is not {numel} x "
                                                    f"{codec.wire_dtype}")
        params = codec.to_f32(wire, scale, out)
    else:
        if frames is None or len(frames) != codec.frames:
            raise ProtocolError(ErrorCode.BAD_FRAMES, f"{encoding} reply needs {codec.frames} frame(s), "
                                                      f"got {0 if frames is None else len(frames)}")
        params = codec.decode(frames, numel, 0, scale, out)
    if not bool(torch.isfinite(params).all()):
        raise ProtocolError(ErrorCode.BAD_VALUE, f"{encoding} reply decodes to non-finite parameters")
    return params


class ReplyDecoder:
    """A client's side: the bytes its pulls' replies carried, and encoded replies decoded,
    checked, into fp32 buffers of its own, one per shard and reply slot (a pipelined
    worker's staged reply is not overwritten by the next)."""

    def __init__(self, shard_sizes: Sequence[int]):
        self.sizes = list(shard_sizes)
        self._buffers: dict[tuple[int, int], torch.Tensor] = {}
        self.wire_bytes = 0    # parameter bytes received, as encoded
        self.fp32_bytes = 0    # what the same replies cost as fp32
        self.decode_s = 0.0    # seconds spent decoding (the codec's own time, this side of the wire)
        self._nbytes: dict[tuple[str, int], int] = {}  # (encoding, numel) -> reply_nbytes: counted per pull

    def count(self, encoding: str, numel: int) -> None:
        nbytes = self._nbytes.get((encoding, numel))
        if nbytes is None:
            nbytes = self._nbytes[encoding, numel] = reply_nbytes(encoding, numel)
        self.wire_bytes += nbytes
        self.fp32_bytes += 4 * numel

    def decode(self, shard: int, slot: int, encoding: str, numel: int, scale: float,
               frames: Optional[Sequence[Any]] = None, wire: Optional[torch.Tensor] = None,
               counted: bool = True) -> torch.Tensor:
        """Shard `shard`'s encoded reply as fp32 parameters (see decode_reply); a malformed one
        raises RemoteError `bad_reply`, as any reply the client cannot use. The tensor is reused
        by the next reply in the same slot. `counted`: a pull's reply (a registration's
        parameters are not counted as pulled)."""
        out = self._buffers.get((shard, slot))
        if out is None:
            out = self._buffers[shard, slot] = torch.empty(self.sizes[shard])
        start = time.perf_counter()
        try:
            params = decode_reply(encoding, numel, scale, out, frames=frames, wire=wire)
        except ProtocolError as exc:
            # Imported here: requests loads the transport (zmq), which the simulator never needs.
            from psgd.wire.requests import RemoteError
            raise RemoteError(shard, "bad_reply", exc.reason) from None
        self.decode_s += time.perf_counter() - start
        if counted:
            self.count(encoding, numel)
        return params
