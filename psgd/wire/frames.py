"""Tensors as raw frames and back, by torch dtype: the zero-copy buffers every
codec sends and the size-checked views every decoder reads. Knows no encoding
names (psgd.wire.codecs does)."""
from __future__ import annotations

import warnings
from typing import Any

import torch

from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["tensor_frame", "view_frame"]


def tensor_frame(t: torch.Tensor):
    """A zero-copy buffer over a contiguous CPU tensor's bytes."""
    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("tensor frames need a contiguous CPU tensor")
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; ship the raw 16-bit words
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


def view_frame(frame: Any, dtype: torch.dtype, numel: int, what: str) -> torch.Tensor:
    """A received frame as a 1-D `dtype` tensor of `numel` elements, without copying.

    The tensor aliases the frame's memory and is read-only in spirit: copy it
    before modifying or keeping it past the frame's lifetime. `what` names the
    frame in the error a wrong size raises."""
    buf = memoryview(frame)
    if numel < 0 or buf.nbytes != numel * dtype.itemsize:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"{what} frame has {buf.nbytes} bytes, header says {numel} x {dtype}")
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    raw = torch.int16 if dtype == torch.bfloat16 else dtype  # numpy-backed buffers know no bfloat16
    if not buf.readonly:  # received ZeroMQ frames are writable: no warning to silence
        t = torch.frombuffer(buf, dtype=raw)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # received frames are read-only buffers
            t = torch.frombuffer(buf, dtype=raw)
    return t.view(dtype) if raw is not dtype else t
