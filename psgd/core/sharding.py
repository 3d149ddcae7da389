"""Parameter layout: which contiguous pieces of which tensors live on which shard.

The layout is a pure function of (named parameter shapes in order, number of
shards), so workers and servers compute it independently and compare
fingerprints at registration. Tensors are placed largest first onto the
least-loaded shard; a tensor that does not fit under the per-shard capacity
ceil(total / S) is split, so no shard holds more than its even share plus
one element.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Optional, Sequence

import torch

__all__ = ["Segment", "Layout", "make_layout", "layout_for_module"]


@dataclass(frozen=True)
class Segment:
    param: int          # index into Layout.names
    param_offset: int   # first element within the flattened parameter
    length: int
    shard_offset: int   # first element within the shard's flat tensor


@dataclass(frozen=True)
class Layout:
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    num_shards: int
    segments: tuple[tuple[Segment, ...], ...]   # per shard, in shard order
    shard_sizes: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.shard_sizes)

    @property
    def fingerprint(self) -> str:
        doc = json.dumps([self.names, self.shapes, self.num_shards,
                          [[(s.param, s.param_offset, s.length) for s in segs] for segs in self.segments]])
        return hashlib.sha256(doc.encode()).hexdigest()[:16]

    def flatten(self, tensors: Sequence[torch.Tensor], out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """Gather full tensors (in layout order) into one flat tensor per shard.

        `out`, if given, is reused (one preallocated buffer per shard).
        """
        flat = [t.reshape(-1) for t in tensors]
        if out is None:
            ref = flat[0] if flat else torch.empty(0)
            out = [torch.empty(n, dtype=ref.dtype, device=ref.device) for n in self.shard_sizes]
        for shard, segs in enumerate(self.segments):
            dst = out[shard]
            for s in segs:
                dst[s.shard_offset:s.shard_offset + s.length].copy_(
                    flat[s.param][s.param_offset:s.param_offset + s.length], non_blocking=True)
        return list(out)

    def flatten_shard(self, tensors: Sequence[Optional[torch.Tensor]], shard: int, out: torch.Tensor,
                      segments: slice = slice(None)) -> torch.Tensor:
        """Gather one shard's part of full tensors (in layout order; only the parameters of
        the shard's `segments` are read, the others may be None) into `out`."""
        for s in self.segments[shard][segments]:
            out[s.shard_offset:s.shard_offset + s.length].copy_(
                tensors[s.param].reshape(-1)[s.param_offset:s.param_offset + s.length])
        return out

    def params_of(self, shard: int) -> frozenset:
        """Indices of the parameters with elements on `shard`."""
        return frozenset(s.param for s in self.segments[shard])

    def unflatten(self, shards: Sequence[torch.Tensor], into: Sequence[Optional[torch.Tensor]]) -> None:
        """Scatter per-shard flat tensors back into full tensors, in place (a None in
        `into`: that parameter is skipped)."""
        flat = [t.view(-1) if t is not None else None for t in into]
        for shard, segs in enumerate(self.segments):
            src = shards[shard]
            for s in segs:
                if flat[s.param] is not None:
                    flat[s.param][s.param_offset:s.param_offset + s.length].copy_(
                        src[s.shard_offset:s.shard_offset + s.length], non_blocking=True)

    def whole_views(self, shards: Sequence[Optional[torch.Tensor]]) -> list[Optional[torch.Tensor]]:
        """Per parameter, a flat view of the shard tensor that holds all of it (one
        segment), or None: the parameter is split over segments, or its shard's tensor
        is None."""
        out: list[Optional[torch.Tensor]] = [None] * len(self.shapes)
        for shard, s in self._whole_segments:
            if shards[shard] is not None:
                out[s.param] = shards[shard][s.shard_offset:s.shard_offset + s.length]
        return out

    @cached_property
    def _whole_segments(self) -> tuple[tuple[int, Segment], ...]:
        """(shard, segment) of every parameter that lies in one segment (computed once)."""
        pieces = Counter(s.param for segs in self.segments for s in segs)
        return tuple((shard, s) for shard, segs in enumerate(self.segments) for s in segs if pieces[s.param] == 1)


def make_layout(named_shapes: Iterable[tuple[str, Sequence[int]]], num_shards: int) -> Layout:
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    names, shapes = [], []
    for name, shape in named_shapes:
        names.append(name)
        shapes.append(tuple(int(d) for d in shape))
    sizes = [_numel(s) for s in shapes]
    total = sum(sizes)
    capacity = -(-total // num_shards) if total else 0
    loads = [0] * num_shards
    pieces: list[list[tuple[int, int, int]]] = [[] for _ in range(num_shards)]
    # Largest first; ties keep model order so the layout is deterministic.
    for p in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        offset, remaining = 0, sizes[p]
        while remaining:
            shard = min(range(num_shards), key=lambda k: (loads[k], k))
            take = min(remaining, capacity - loads[shard])
            pieces[shard].append((p, offset, take))
            loads[shard] += take
            offset += take
            remaining -= take
    segments = []
    for shard_pieces in pieces:
        segs, pos = [], 0
        for p, off, length in shard_pieces:
            segs.append(Segment(p, off, length, pos))
            pos += length
        segments.append(tuple(segs))
    return Layout(tuple(names), tuple(shapes), num_shards, tuple(segments), tuple(loads))


def layout_for_module(module: torch.nn.Module, num_shards: int) -> Layout:
    """Layout of a module's trainable parameters, in `named_parameters` order."""
    return make_layout(((n, p.shape) for n, p in module.named_parameters() if p.requires_grad), num_shards)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
