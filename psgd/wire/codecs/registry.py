"""Every codec, found by importing each member module of this package once
(psgd.core.members), and checked against the config's `wire.compression`
words: a codec module that registers nothing, a codec the config cannot
select, or a config word with no codec fails at import, naming it.

A codec has one word: the `wire.compression` value, the protocol's `encoding`
and the bench's `+` suffix. The config is the lowest layer and cannot import the
wire, so it spells the words users may write (`CODEC_WORDS`); everything else
(frames, decoders, the wire cost) comes from here.
"""
from __future__ import annotations

import typing
from typing import Optional, Sequence

import torch

from psgd.config.operations import REPLY_COMPRESSIONS, Compression, WireConfig
from psgd.core.members import check_words, import_members
from psgd.wire.codecs.base import CODECS, Codec, CodecOptions
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["CODECS", "codec_named", "dense_codec", "codec_for_compression", "encodings_for",
           "check_codecs", "check_reply_codecs", "DeltaCodecs"]


def check_codecs(codecs: dict[str, type[Codec]], compression_values: tuple[str, ...]) -> None:
    """Raise unless each config word names exactly one codec and each codec's word is one of them
    (@codec already refuses two codecs with one name)."""
    check_words("wire.compression", compression_values, {c.name: c for c in codecs.values()}, "codec",
                "psgd.config.operations.Compression")


def codec_named(encoding: str) -> type[Codec]:
    """The codec whose word is `encoding`, as a message names it (ProtocolError BAD_ENCODING if none)."""
    try:
        return CODECS[encoding]
    except (KeyError, TypeError):
        raise ProtocolError(ErrorCode.BAD_ENCODING, f"unknown tensor encoding {encoding!r}") from None


def dense_codec(encoding: str) -> Optional[type[Codec]]:
    """The codec named `encoding` if it is dense (one frame of `numel` values), else None."""
    codec = CODECS.get(encoding)
    return codec if codec is not None and codec.dense else None


def codec_for_compression(compression: str) -> type[Codec]:
    """The codec a `wire.compression` word selects (ValueError if none)."""
    found = CODECS.get(compression)
    if found is None:
        raise ValueError(f"wire.compression {compression!r} selects no codec")
    return found


def encodings_for(wire: WireConfig, shard_sizes: Sequence[int], local_updates: bool) -> list[str]:
    """Each shard's push encoding (a codec's word), as `wire.compression` chooses it."""
    return [codec_for_compression(c).name for c in wire.compression_for(shard_sizes, local_updates)]


class DeltaCodecs:
    """The run's codecs as a worker hands them to its local method (the method's layer sits
    below the wire: psgd.core.local_methods.base.Codecs)."""

    def __init__(self, wire: WireConfig, shard_sizes: Sequence[int]):
        self.options = CodecOptions(topk_ratio=wire.topk_ratio)
        self.pushes = list(wire.compression_for(shard_sizes, True))  # each shard's word for a delta

    def round_trip(self, compression: str, x: torch.Tensor) -> torch.Tensor:
        codec = codec_for_compression(compression)([x.numel()], self.options)
        encoded = codec.encode(0, x)
        got = codec.decode(encoded.frames, x.numel(), encoded.nnz, encoded.scale, torch.empty(x.numel()))
        if isinstance(got, tuple):  # sparse: (indices, values)
            return torch.zeros(x.numel()).index_copy_(0, got[0].long(), got[1])
        return got


def check_reply_codecs(codecs: dict[str, type[Codec]], reply_values: tuple[str, ...]) -> None:
    """Raise unless the config's reply values are exactly the codecs that keep no residual and
    send every coordinate (a reply goes to many workers and becomes their whole model)."""
    whole = sorted(c.name for c in codecs.values() if not (c.error_feedback or c.sparse))
    if whole != sorted(reply_values):
        raise ImportError(f"wire.compression.replies allows {sorted(reply_values)}, but the codecs that keep no "
                          f"residual and send every coordinate are {whole}: update its not-for-replies flag in "
                          f"psgd.config.operations.CODEC_WORDS")


import_members("psgd.wire.codecs", ("base", "encoder", "registry", "runs"), CODECS.values)
check_codecs(CODECS, typing.get_args(Compression))
check_reply_codecs(CODECS, REPLY_COMPRESSIONS)
