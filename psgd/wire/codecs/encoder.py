"""A worker's gradient encoder: one codec instance (psgd.wire.codecs) for the
worker's shards, and the count of the bytes it puts on the wire against what
fp32 would have cost. The returned frames alias the codec's buffers: send them
before the next `encode` call. Not thread-safe.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from psgd.wire.codecs.base import Codec, CodecOptions, DenseCodec, Encoded
from psgd.wire.codecs.registry import codec_named

__all__ = ["WireEncoder"]


class WireEncoder:
    def __init__(self, encoding: str, shard_sizes: Sequence[int], topk_ratio: float = 0.01):
        self.codec: Codec = codec_named(encoding)(shard_sizes, CodecOptions(topk_ratio=topk_ratio))
        self.encoding = encoding
        self.sizes = list(shard_sizes)
        self.wire_bytes = 0     # payload bytes encoded so far
        self.fp32_bytes = 0     # what the same gradients cost as fp32
        # The dense payload's dtype (None for a sparse codec): an `out` given to `encode` must have it.
        self.wire_dtype = self.codec.wire_dtype if self.codec.dense else None

    @property
    def compression_ratio(self) -> float:
        """Wire bytes / fp32 bytes (0.5 for fp16); 1.0 before anything was sent."""
        return self.wire_bytes / self.fp32_bytes if self.fp32_bytes else 1.0

    @property
    def elementwise(self) -> bool:
        """Whether a gradient encoded piece by piece is the same bytes as encoded whole."""
        return self.codec.elementwise

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        """Encode one shard's flat float32 gradient (not modified). Dense codecs
        other than fp32: into `out` (a `wire_dtype` tensor of the gradient's size,
        e.g. a shared-memory request region) instead of the codec's own buffer."""
        encoded = self.codec.encode(shard, grad, out)
        self.wire_bytes += sum(memoryview(f).nbytes for f in encoded.frames)
        self.fp32_bytes += 4 * grad.numel()
        return encoded

    def encode_piece(self, shard: int, grad: torch.Tensor, offset: int, numel: int) -> Encoded:
        """Elements [offset, offset + numel) of one shard's flat float32 gradient, as
        `encode` would put them on the wire (elementwise codecs only)."""
        if not isinstance(self.codec, DenseCodec):
            raise ValueError(f"{self.encoding} gradients cannot be encoded piece by piece")
        encoded = self.codec.encode_piece(shard, grad, offset, numel)
        self.wire_bytes += memoryview(encoded.frames[0]).nbytes
        self.fp32_bytes += 4 * numel
        return encoded

    def forget(self) -> None:
        """Let go of the last payloads (they may view memory the caller is releasing)."""
        self.codec.forget()
