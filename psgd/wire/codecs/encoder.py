"""A worker's gradient encoder: one codec (psgd.wire.codecs) per shard, chosen
per shard by `wire.compression` (one instance per codec, shared by its shards),
or one per run of a shard pushed in runs (psgd.wire.codecs.runs; each run keeps
its own codec state, an error-feedback residual included),
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
from psgd.wire.codecs.runs import RUNS, Plan, plan_encoding, single_plans

__all__ = ["WireEncoder"]


class WireEncoder:
    def __init__(self, encoding: Union[str, Sequence[str]], shard_sizes: Sequence[int], topk_ratio: float = 0.01,
                 plans: Optional[Sequence[Plan]] = None):
        """`encoding`: one codec word for every shard, or one per shard; `plans`: instead, each
        shard's runs (psgd.wire.codecs.runs.push_plans)."""
        self.sizes = list(shard_sizes)
        if plans is None:
            names = [encoding] * len(self.sizes) if isinstance(encoding, str) else list(encoding)
            if len(names) != len(self.sizes):
                raise ValueError(f"{len(names)} encodings for {len(self.sizes)} shards")
            plans = single_plans(names, self.sizes)
        if len(plans) != len(self.sizes) or any(sum(r.numel for r in p) != n for p, n in zip(plans, self.sizes)):
            raise ValueError(f"push plans do not cover the shards' sizes {self.sizes}")
        self.plans = list(plans)
        self.encodings = [plan_encoding(p) for p in self.plans]
        # Codec slots: shard s is slot s; the runs of a shard of several runs take slots after the shards.
        self._run_slots: dict[int, list[int]] = {}
        slots = [(p[0].encoding if len(p) == 1 else "", n) for p, n in zip(self.plans, self.sizes)]
        for s, plan in enumerate(self.plans):
            if len(plan) > 1:
                self._run_slots[s] = list(range(len(slots), len(slots) + len(plan)))
                slots += [(r.encoding, r.numel) for r in plan]
        options = CodecOptions(topk_ratio=topk_ratio)
        self._slot_codecs: dict[str, Codec] = {}
        for name in dict.fromkeys(e for e, _ in slots if e):  # each codec holds buffers only for its own slots
            self._slot_codecs[name] = codec_named(name)([n if e == name else 0 for e, n in slots], options)
        self.codecs: list[Optional[Codec]] = [self._slot_codecs[e] if e else None for e, _ in slots[:len(self.sizes)]]
        self.wire_bytes = 0     # payload bytes encoded so far
        self.fp32_bytes = 0     # what the same gradients cost as fp32
        self.encode_s = 0.0     # seconds spent encoding (the codec's own time, this side of the wire)

    @classmethod
    def from_plans(cls, plans: Sequence[Plan], topk_ratio: float = 0.01) -> "WireEncoder":
        """An encoder for shards pushed in `plans` (psgd.wire.codecs.runs.push_plans)."""
        return cls((), [sum(r.numel for r in plan) for plan in plans], topk_ratio, plans=plans)

    @property
    def codec(self) -> Codec:
        """The codec of every shard (an encoder with one encoding)."""
        if self.encoding == "mixed":
            raise ValueError(f"this encoder has one codec per shard ({', '.join(self.encodings)})")
        return self.codecs[0]

    @property
    def encoding(self) -> str:
        """The one codec of every shard, or "mixed" (several, or shards pushed in runs)."""
        return self.encodings[0] if len(set(self.encodings)) == 1 and self.encodings[0] != RUNS else "mixed"

    def wire_dtype(self, shard: int) -> Optional[torch.dtype]:
        """Shard's dense payload dtype (None for a codec of several frames): an `out` given to `encode` must have it."""
        c = self.codecs[shard]
        return c.wire_dtype if c is not None and c.dense else None

    @property
    def compression_ratio(self) -> float:
        """Wire bytes / fp32 bytes (0.5 for fp16); 1.0 before anything was sent."""
        return self.wire_bytes / self.fp32_bytes if self.fp32_bytes else 1.0

    @property
    def elementwise(self) -> bool:
        """Whether every shard's gradient encoded piece by piece is the same bytes as encoded whole."""
        return all(c is not None and c.elementwise for c in self.codecs)

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        """Encode one shard's float32 gradient (not modified; any shape, any device: the frames
        are on the host). Dense codecs
        other than fp32: into `out` (a `wire_dtype` tensor of the gradient's size,
        e.g. a shared-memory request region) instead of the codec's own buffer."""
        start = time.perf_counter()
        slots = self._run_slots.get(shard)
        if slots is not None and out is not None:
            raise ValueError(f"shard {shard} is pushed in runs: its payload cannot be encoded into one tensor")
        encoded = self.codecs[shard].encode(shard, grad, out) if slots is None else self._encode_runs(shard, slots, grad)
        self.encode_s += time.perf_counter() - start
        for frame in encoded.frames:  # a loop, not sum() over a generator: most pushes carry one frame
            self.wire_bytes += memoryview(frame).nbytes
        self.fp32_bytes += 4 * grad.numel()
        return encoded

    def _encode_runs(self, shard: int, slots: list[int], grad: torch.Tensor) -> Encoded:
        """A shard pushed in runs: each run's stretch of `grad` by the run's own codec slot."""
        frames, runs = [], []
        for run, slot in zip(self.plans[shard], slots):
            part = self._slot_codecs[run.encoding].encode(slot, grad[run.offset:run.offset + run.numel])
            frames += part.frames
            runs.append([part.encoding, part.scale, part.nnz])
        return Encoded(frames, RUNS, runs=runs)

    def run_codecs(self, shard: int) -> list[tuple[Codec, int]]:
        """Each run of a shard pushed in runs: its codec and the slot its state (a residual) is kept under."""
        return [(self._slot_codecs[run.encoding], slot) for run, slot in zip(self.plans[shard], self._run_slots[shard])]

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
        for c in self._slot_codecs.values():
            c.forget()
