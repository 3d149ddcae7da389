"""A worker's gradient encoder: one codec (psgd.wire.codecs) per shard, chosen
per shard by `wire.compression` (one instance per codec, shared by its shards),
and the count of the bytes it puts on the wire against what fp32 would have
cost, and of its own time. The returned frames alias the codecs' buffers: send
them before the next `encode` call. Not thread-safe.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence, Union

import torch

from psgd.wire.codecs.base import Codec, CodecOptions, DenseCodec, Encoded
from psgd.wire.codecs.registry import codec_named

__all__ = ["WireEncoder"]


class WireEncoder:
    def __init__(self, encoding: Union[str, Sequence[str]], shard_sizes: Sequence[int], topk_ratio: float = 0.01):
        """`encoding`: one wire name for every shard, or one per shard."""
        self.sizes = list(shard_sizes)
        self.encodings = [encoding] * len(self.sizes) if isinstance(encoding, str) else list(encoding)
        if len(self.encodings) != len(self.sizes):
            raise ValueError(f"{len(self.encodings)} encodings for {len(self.sizes)} shards")
        options = CodecOptions(topk_ratio=topk_ratio)
        instances: dict[str, Codec] = {}
        for name in dict.fromkeys(self.encodings):  # each codec holds buffers only for its own shards
            instances[name] = codec_named(name)([n if e == name else 0 for n, e in zip(self.sizes, self.encodings)],
                                                options)
        self.codecs: list[Codec] = [instances[e] for e in self.encodings]
        self.wire_bytes = 0     # payload bytes encoded so far
        self.fp32_bytes = 0     # what the same gradients cost as fp32
        self.encode_s = 0.0     # seconds spent encoding (the codec's own time, this side of the wire)

    @property
    def codec(self) -> Codec:
        """The codec of every shard (an encoder with one encoding)."""
        if len(set(self.encodings)) > 1:
            raise ValueError(f"this encoder has one codec per shard ({', '.join(self.encodings)})")
        return self.codecs[0]

    @property
    def encoding(self) -> str:
        """The one encoding of every shard, or "mixed"."""
        return self.encodings[0] if len(set(self.encodings)) == 1 else "mixed"

    def wire_dtype(self, shard: int) -> Optional[torch.dtype]:
        """Shard's dense payload dtype (None for a codec of several frames): an `out` given to `encode` must have it."""
        c = self.codecs[shard]
        return c.wire_dtype if c.dense else None

    @property
    def compression_ratio(self) -> float:
        """Wire bytes / fp32 bytes (0.5 for fp16); 1.0 before anything was sent."""
        return self.wire_bytes / self.fp32_bytes if self.fp32_bytes else 1.0

    @property
    def elementwise(self) -> bool:
        """Whether every shard's gradient encoded piece by piece is the same bytes as encoded whole."""
        return all(c.elementwise for c in self.codecs)

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        """Encode one shard's float32 gradient (not modified; any shape, any device: the frames
        are on the host). Dense codecs
        other than fp32: into `out` (a `wire_dtype` tensor of the gradient's size,
        e.g. a shared-memory request region) instead of the codec's own buffer."""
        start = time.perf_counter()
        encoded = self.codecs[shard].encode(shard, grad, out)
        self.encode_s += time.perf_counter() - start
        self.wire_bytes += sum(memoryview(f).nbytes for f in encoded.frames)
        self.fp32_bytes += 4 * grad.numel()
        return encoded

    def encode_piece(self, shard: int, grad: torch.Tensor, offset: int, numel: int) -> Encoded:
        """Elements [offset, offset + numel) of one shard's flat float32 gradient, as
        `encode` would put them on the wire (elementwise codecs only)."""
        codec = self.codecs[shard]
        if not isinstance(codec, DenseCodec):
            raise ValueError(f"{self.encodings[shard]} gradients cannot be encoded piece by piece")
        start = time.perf_counter()
        encoded = codec.encode_piece(shard, grad, offset, numel)
        self.encode_s += time.perf_counter() - start
        self.wire_bytes += memoryview(encoded.frames[0]).nbytes
        self.fp32_bytes += 4 * numel
        return encoded

    def forget(self) -> None:
        """Let go of the last payloads (they may view memory the caller is releasing)."""
        for c in dict.fromkeys(self.codecs):
            c.forget()
