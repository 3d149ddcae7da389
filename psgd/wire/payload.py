"""Tensor payloads on the wire: the frames after a message's header, as zero-copy
buffers one way and tensors the other, by encoding name (psgd.wire.codecs)."""
from __future__ import annotations

from typing import Any

import torch

from psgd.wire import protocol as P
from psgd.wire.codecs import CODECS, DenseCodec, codec_named
from psgd.wire.codecs.runs import RUNS, plan_frames
from psgd.wire.frames import tensor_frame
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["tensor_frame", "frame_to_tensor", "payload_frames", "wire_nbytes"]


def frame_to_tensor(frame: Any, encoding: str, numel: int) -> torch.Tensor:
    """View a received frame of a dense encoding as a 1-D tensor of its wire
    dtype without copying; checks its size. The tensor aliases the frame's
    memory: copy it before modifying or keeping it past the frame's lifetime."""
    codec = codec_named(encoding)
    if not issubclass(codec, DenseCodec):
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"{encoding} is not a dense tensor encoding")
    return codec.view(frame, numel)


def payload_frames(record: P.Record) -> int:
    """How many tensor frames follow the header of `record` (an unknown
    encoding counts one: its decoder refuses it)."""
    if isinstance(record, P.Params):  # first: a client reads one per pull
        if record.shm:
            return 0
        codec = CODECS.get(record.encoding)
        return codec.frames if codec is not None else 1
    if isinstance(record, P.Push):
        if record.encoding == RUNS and not record.shm:
            return plan_frames(record.runs)
        codec = CODECS.get(record.encoding)
        return 0 if record.shm else codec.frames if codec is not None else 1
    if isinstance(record, P.Welcome):
        codec = CODECS.get(record.encoding)
        return codec.frames if codec is not None else 1
    return 0


def wire_nbytes(encoding: str, numel: int, nnz: int = 0) -> int:
    """Payload bytes of one gradient in `encoding` (headers excluded)."""
    return codec_named(encoding).wire_nbytes(numel, nnz)
