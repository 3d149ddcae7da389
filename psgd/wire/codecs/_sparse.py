"""What the sparse codecs share (topk, topk_int2): k = ceil(topk_ratio * numel) coordinates
of each shard's gradient travel as an int32 index frame (ascending, checked on decode)
followed by the codec's value frames. A sparse codec says only how it chooses and writes
its coordinates (`encode_sparse`) and how its values are read back (`decode_values`)."""
from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar, Optional, Sequence

import torch

from psgd.wire.codecs.base import Codec, CodecOptions, Encoded, Gradient
from psgd.wire.frames import view_frame
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["SparseCodec", "check_indices", "largest", "topk_count"]


def topk_count(numel: int, ratio: float) -> int:
    """Coordinates kept per step: ceil(ratio * numel), at least one (if any)."""
    return min(numel, max(1, math.ceil(ratio * numel))) if numel else 0


def largest(x: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of flat `x`'s k largest magnitudes, ascending (on x's device)."""
    return x.abs().topk(k, sorted=False).indices.sort().values


def check_indices(name: str, frame: Any, numel: int, nnz: int) -> torch.Tensor:
    """A sparse payload's index frame (int32, `nnz` of them, each in [0, numel)) as a tensor."""
    if not 0 <= nnz <= numel:
        raise ProtocolError(ErrorCode.BAD_SIZE, f"nnz {nnz} outside 0..{numel}")
    indices = view_frame(frame, torch.int32, nnz, "index")
    if nnz and (int(indices.min()) < 0 or int(indices.max()) >= numel):
        raise ProtocolError(ErrorCode.BAD_INDEX, f"{name} index outside 0..{numel - 1}")
    return indices


class SparseCodec(Codec):
    dense = False
    elementwise = False
    sparse = True
    frame_words: ClassVar[str]  # the frames a payload needs, in words: "an index and a value frame"

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        if not 0 < options.topk_ratio <= 1:
            raise ValueError(f"topk_ratio must be in (0, 1], got {options.topk_ratio}")
        super().__init__(sizes, options)
        self.k = [topk_count(n, options.topk_ratio) for n in self.sizes]

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        if out is not None:
            raise ValueError(f"a {self.name} payload cannot be encoded into a {out.dtype} tensor of {out.numel()}")
        return self.encode_sparse(shard, grad.reshape(-1))

    @abstractmethod
    def encode_sparse(self, shard: int, flat: torch.Tensor) -> Encoded:
        """The frames of shard `shard`'s flat gradient: the index frame first."""

    @classmethod
    def decode(cls, frames: Sequence[Any], numel: int, nnz: int, scale: float,
               out: torch.Tensor) -> Gradient:
        """(indices, values): every index in [0, numel), the values as the codec checks them."""
        if len(frames) != cls.frames:
            raise ProtocolError(ErrorCode.BAD_FRAMES, f"{cls.name} gradient needs {cls.frame_words}, got {len(frames)}")
        return check_indices(cls.name, frames[0], numel, nnz), cls.decode_values(frames[1:], nnz, scale)

    @classmethod
    @abstractmethod
    def decode_values(cls, frames: Sequence[Any], nnz: int, scale: float) -> torch.Tensor:
        """The `nnz` values that the frames after the index frame carry (ProtocolError if malformed)."""
