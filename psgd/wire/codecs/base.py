"""The codec contract: what a gradient encoding must say and do, and the table
that holds every codec, checked as each one is added.

A codec is one class in one module of this package, decorated with `@codec`:
its one word (`name`: the `wire.compression` value that selects it, the protocol's
`encoding` field, the bench's `+` suffix), its payload's frames and dtype, whether it encodes element by
element, what it costs on the wire (bytes per gradient element) and on a CPU
thread (`cost`: encode and decode rates, stated with where they were measured;
the simulator's time model reads both), and `encode` / `decode`. `@codec`
refuses a class that lacks any of these, so a codec with a missing part fails
at import.

An instance belongs to one worker's encoder and may keep per-shard state
(buffers, top-k's residuals); `decode` is a class method (the shard keeps none).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence, Union

import torch

from psgd.wire.frames import tensor_frame, view_frame

__all__ = ["Codec", "CodecCost", "DenseCodec", "Encoded", "Gradient", "CodecOptions", "CODECS", "codec",
           "REFERENCE_EPYC", "DEV_MACHINE"]

# What a shard applies: a dense fp32 gradient, or (int32 indices, fp32 values) of a sparse one.
Gradient = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class CodecOptions:
    """The `wire:` settings a codec may read (psgd.config.WireConfig)."""
    topk_ratio: float = 0.01   # sparse codecs: fraction of each shard's coordinates sent per push


# Where the codecs' CPU rates were measured (CodecCost.measured_on): psgd's own encoder
# (WireEncoder) and the shard's decode of one 1M-element fp32 gradient, median of 15 runs.
REFERENCE_EPYC = "one thread of an AMD EPYC, the project's reference machine"
DEV_MACHINE = "one thread of the project's 2-core development machine, process time"


@dataclass(frozen=True)
class CodecCost:
    """What a codec's encode (on the worker) and decode (on the shard) take on one
    CPU thread, in gigabytes/s of fp32 gradient: the figures the simulator uses
    where `sim.encode_gbytes_per_s` / `sim.decode_gbytes_per_s` give none. A
    top-k decode is the copy of its indices and values; scattering them into the
    dense update belongs to the apply (sim.apply_gbytes_per_s)."""
    encode_gbytes_per_s: float
    decode_gbytes_per_s: float
    measured_on: str  # the machine and method behind the figures

    def __post_init__(self):
        if not (self.encode_gbytes_per_s > 0 and self.decode_gbytes_per_s > 0 and self.measured_on):
            raise ValueError(f"a codec's cost needs positive rates and where they were measured, got {self}")


@dataclass(frozen=True)
class Encoded:
    frames: list            # payload frames for this shard's push
    encoding: str           # the codec's word
    scale: float = 1.0      # value = wire * scale (scaled codecs)
    nnz: int = 0            # sparse codecs: coordinates sent
    tensor: Optional[torch.Tensor] = None  # dense codecs: the payload the frame views
    runs: list = field(default_factory=list)  # a push in runs (psgd.wire.codecs.runs): [encoding, scale, nnz] each


class Codec(ABC):
    """One gradient encoding. Subclasses set every class attribute below and
    implement the abstract methods; `@codec` checks both."""

    name: ClassVar[str]               # its word: the `wire.compression` value and the protocol's `encoding`
    frames: ClassVar[int]             # payload frames after a push's header
    wire_dtype: ClassVar[torch.dtype]  # dtype of the values it sends
    dense: ClassVar[bool]             # one frame of `numel` values (may travel through shared memory)
    elementwise: ClassVar[bool]       # an element's bytes depend on it alone: a gradient may go in pieces
    error_feedback: ClassVar[bool]    # keeps a residual per receiver (never for replies, sent to many workers)
    sparse: ClassVar[bool] = False    # decodes to (indices, values) of some coordinates (never for replies either)
    cost: ClassVar[Optional[CodecCost]]  # CPU time to encode and decode; None: free (the gradient travels as it is)

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        self.sizes = list(sizes)
        self.options = options
        self._frames: dict[int, tuple] = {}  # shard -> (tensor, data_ptr, frame) of the last payload

    def forget(self) -> None:
        """Let go of the last payloads (they may view memory the caller is releasing)."""
        self._frames.clear()

    @classmethod
    @abstractmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        """Payload bytes per fp32 gradient element, on average: its wire cost."""

    @classmethod
    @abstractmethod
    def round_trip_bound(cls, x: torch.Tensor, options: CodecOptions) -> torch.Tensor:
        """The largest |x - decode(encode(x))| its docstring states, per element of `x` (float64,
        flat, on x's device), for one encode by a fresh instance (an empty residual)."""

    @abstractmethod
    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        """One shard's fp32 gradient (not modified) as payload frames on the CPU: any shape
        (encoded as its elements in C order), on any device (the arithmetic runs there, with
        no kernel whose rounding differs by device, so a GPU is meant to put the CPU's bytes
        on the wire: benchmarks/gpu's codecs check says where it does). `out`: dense codecs
        only, a `wire_dtype` CPU tensor to encode into."""

    @classmethod
    @abstractmethod
    def decode(cls, frames: Sequence[Any], numel: int, nnz: int, scale: float,
               out: torch.Tensor) -> Gradient:
        """The gradient a push's frames carry, checked against the header's
        `numel` / `nnz` (ProtocolError otherwise). A dense result is fp32: a view
        of the frame, or written into `out` (an fp32 buffer of `numel`)."""

    @classmethod
    def to_f32(cls, wire: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
        """A dense payload (`wire_dtype`, e.g. copied out of shared memory) as the
        fp32 values it stands for: `wire` itself when it is fp32, else written into `out`."""
        if wire.dtype == torch.float32:
            return wire
        out.copy_(wire)
        return out.mul_(scale) if scale != 1.0 else out

    @classmethod
    def wire_nbytes(cls, numel: int, nnz: int = 0) -> int:
        """Payload bytes of one gradient (headers excluded)."""
        itemsize = cls.wire_dtype.itemsize
        return itemsize * numel if cls.dense else (4 + itemsize) * nnz


class DenseCodec(Codec):
    """A codec whose payload is one frame of `numel` values of `wire_dtype`:
    it only says how a gradient fills that payload (`fill`). Keeps one payload
    buffer per shard (none for fp32, which sends the gradient itself), reused
    every step, and hands out the same frame object while the payload tensor
    is the same (the transport keeps reusing the message built around it)."""

    frames = 1
    dense = True
    error_feedback = False

    def __init__(self, sizes: Sequence[int], options: CodecOptions):
        super().__init__(sizes, options)
        self._buffers = ([] if self.wire_dtype == torch.float32
                         else [torch.empty(n, dtype=self.wire_dtype) for n in self.sizes])

    @classmethod
    def bytes_per_element(cls, options: CodecOptions) -> float:
        return cls.wire_dtype.itemsize

    @abstractmethod
    def fill(self, grad: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, float]:
        """(payload, scale): the flat `grad` (on any device) encoded into `out` (a `wire_dtype`
        CPU tensor of its size; fp32 may return `grad` itself when it is on the CPU), and the
        scale a reader multiplies by."""

    def encode(self, shard: int, grad: torch.Tensor, out: Optional[torch.Tensor] = None) -> Encoded:
        if out is not None and (self.wire_dtype == torch.float32 or out.dtype != self.wire_dtype
                                or out.numel() != grad.numel()):
            raise ValueError(f"an {self.name} payload cannot be encoded into a {out.dtype} tensor of {out.numel()}")
        grad = grad if grad.dim() == 1 else grad.reshape(-1)  # _flat, inline: every push runs it
        payload, scale = self.fill(grad, self._buffers[shard] if out is None and self._buffers else out)
        return Encoded([self._frame(shard, payload)], self.name, scale=scale, tensor=payload)

    def encode_piece(self, shard: int, grad: torch.Tensor, offset: int, numel: int) -> Encoded:
        """Elements [offset, offset + numel) of one shard's gradient, as `encode`
        puts them on the wire (elementwise codecs only)."""
        if not self.elementwise:
            raise ValueError(f"{self.name} gradients cannot be encoded piece by piece")
        out = self._buffers[shard][offset:offset + numel] if self._buffers else None
        payload, _ = self.fill(_flat(grad)[offset:offset + numel], out)
        return Encoded([tensor_frame(payload)], self.name)

    def _frame(self, shard: int, t: torch.Tensor):
        hit = self._frames.get(shard)
        if hit is None or hit[0] is not t or hit[1] != t.data_ptr():
            hit = self._frames[shard] = (t, t.data_ptr(), tensor_frame(t))
        return hit[2]

    @classmethod
    def view(cls, frame: Any, numel: int) -> torch.Tensor:
        """The payload frame as a `wire_dtype` tensor (no copy), size checked."""
        return view_frame(frame, cls.wire_dtype, numel, "gradient")

    @classmethod
    def decode(cls, frames: Sequence[Any], numel: int, nnz: int, scale: float,
               out: torch.Tensor) -> Gradient:
        return cls.to_f32(cls.view(frames[0], numel), scale, out)


def _flat(grad: torch.Tensor) -> torch.Tensor:
    """The gradient's elements as a 1-D tensor: a flat one as it is, so a buffer pushed
    every step stays the same object and keeps its ZeroMQ frame (DenseCodec._frame)."""
    return grad if grad.dim() == 1 else grad.reshape(-1)


# Word -> codec class; filled by @codec as each member module is imported.
CODECS: dict[str, type[Codec]] = {}

_ATTRIBUTES = {"name": str, "frames": int, "wire_dtype": torch.dtype, "dense": bool,
               "elementwise": bool, "error_feedback": bool, "sparse": bool}


def codec(cls: type[Codec]) -> type[Codec]:
    """Class decorator: add `cls` to CODECS after checking it has every part."""
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise TypeError(f"{cls!r} is not a Codec subclass")
    for attr, kind in _ATTRIBUTES.items():
        value = getattr(cls, attr, None)
        if not isinstance(value, kind) or (kind is str and not value):
            raise TypeError(f"codec {cls.__name__} lacks {attr} (a {kind.__name__})")
    if not isinstance(getattr(cls, "cost", False), (CodecCost, type(None))):
        raise TypeError(f"codec {cls.__name__} lacks cost (a CodecCost, or None for a codec that costs no CPU)")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"codec {cls.__name__} lacks {', '.join(missing)}")
    if cls.frames < 1 or (cls.dense and cls.frames != 1):
        raise TypeError(f"codec {cls.__name__}: frames must be >= 1, and 1 for a dense codec")
    if cls.sparse and cls.dense:
        raise TypeError(f"codec {cls.__name__}: a sparse codec cannot be dense")
    if cls.elementwise and not cls.dense:
        raise TypeError(f"codec {cls.__name__}: only a dense codec can be elementwise")
    for other in CODECS.values():
        if other is not cls and other.name == cls.name:
            raise TypeError(f"codec {cls.__name__} reuses the name of {other.__name__} ({cls.name!r})")
    CODECS[cls.name] = cls
    return cls
