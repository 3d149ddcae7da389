"""Tensor payloads on the wire: the frames after a message's header, as zero-copy
buffers one way and tensors (dense, or top-k indices and values) the other."""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch

from psgd.wire.protocol import ENCODINGS, SPARSE_ENCODINGS, ErrorCode, ProtocolError

__all__ = ["tensor_frame", "frame_to_tensor", "sparse_frames", "frames_to_sparse", "wire_nbytes"]


def tensor_frame(t: torch.Tensor):
    """A zero-copy buffer over a contiguous CPU tensor's bytes."""
    if not t.is_contiguous() or t.device.type != "cpu":
        raise ValueError("tensor frames need a contiguous CPU tensor")
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; ship the raw 16-bit words
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


def frame_to_tensor(frame: Any, encoding: str, numel: int) -> torch.Tensor:
    """View a received frame as a 1-D tensor without copying; checks its size.

    The tensor aliases the frame's memory and is read-only in spirit: copy it
    before modifying or keeping it past the frame's lifetime.
    """
    if encoding not in ENCODINGS:
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"unknown tensor encoding {encoding!r}")
    dtype, itemsize = ENCODINGS[encoding]
    buf = memoryview(frame)
    if numel < 0 or buf.nbytes != numel * itemsize:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"frame has {buf.nbytes} bytes, header says {numel} x {encoding}")
    if numel == 0:
        return torch.empty(0, dtype=dtype)
    if not buf.readonly:  # received ZeroMQ frames are writable: no warning to silence
        if dtype == torch.bfloat16:
            return torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        return torch.frombuffer(buf, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # received frames are read-only buffers
        if dtype == torch.bfloat16:
            return torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        return torch.frombuffer(buf, dtype=dtype)



def sparse_frames(indices: torch.Tensor, values: torch.Tensor, encoding: str = "topk") -> list:
    """The two zero-copy frames of a sparse gradient (indices, then values)."""
    idx_dtype, val_dtype = SPARSE_ENCODINGS[encoding]
    if indices.dtype != idx_dtype or values.dtype != val_dtype or indices.numel() != values.numel():
        raise ValueError(f"{encoding} needs {idx_dtype} indices and as many {val_dtype} values")
    return [tensor_frame(indices), tensor_frame(values)]


def frames_to_sparse(frames: Sequence[Any], encoding: str, numel: int, nnz: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, values) viewing a sparse gradient's two frames without copying.
    Checks frame sizes and that every index lies in [0, numel)."""
    if encoding not in SPARSE_ENCODINGS:
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"unknown sparse encoding {encoding!r}")
    if len(frames) != 2:
        raise ProtocolError(ErrorCode.BAD_FRAMES, f"{encoding} gradient needs an index and a value frame, got {len(frames)}")
    if not 0 <= nnz <= numel:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"nnz {nnz} outside 0..{numel}")
    idx_dtype, val_dtype = SPARSE_ENCODINGS[encoding]
    out = []
    for frame, dtype, what in ((frames[0], idx_dtype, "index"), (frames[1], val_dtype, "value")):
        buf = memoryview(frame)
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if buf.nbytes != nnz * itemsize:
            raise ProtocolError(ErrorCode.BAD_SIZE, f"{what} frame has {buf.nbytes} bytes, header says {nnz} x {dtype}")
        if nnz == 0:
            out.append(torch.empty(0, dtype=dtype))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # received frames are read-only buffers
            out.append(torch.frombuffer(buf, dtype=dtype))
    indices, values = out
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= numel):
        raise ProtocolError(ErrorCode.BAD_INDEX, f"{encoding} index outside 0..{numel - 1}")
    return indices, values


def wire_nbytes(encoding: str, numel: int, nnz: int = 0) -> int:
    """Payload bytes of one gradient in `encoding` (headers excluded)."""
    if encoding in SPARSE_ENCODINGS:
        return sum(torch.empty(0, dtype=d).element_size() for d in SPARSE_ENCODINGS[encoding]) * nnz
    return ENCODINGS[encoding][1] * numel
