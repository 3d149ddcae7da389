"""A push in runs (`wire.compression.choose_by: tensor`): one shard's flat gradient
cut into consecutive stretches of tensors, each encoded by its own codec.

Both sides derive the same plan from the config and the parameter layout
(`push_plans`): worker and shard never send it. A push of one run is today's
push, one encoding for the whole shard. A push of several has the encoding
RUNS; its header's `runs` lists each run's [encoding, scale, nnz], and its
frames are the runs' frames one after another. The shard checks the header's
encodings against its own plan, so the run lengths come from the plan alone.
The register fingerprint covers any plan of several runs (`plan_fingerprint`):
a client whose plan differs is refused at registration.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from psgd.config.operations import WireConfig
from psgd.core.sharding import Layout
from psgd.wire.codecs.base import CODECS, Codec, Gradient
from psgd.wire.codecs.registry import codec_for_compression, codec_named
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["RUNS", "Run", "Plan", "push_plans", "single_plans", "plan_encoding", "plan_fingerprint", "plan_frames", "decode_runs"]

RUNS = "runs"  # a push's `encoding` when its frames are several runs'


@dataclass(frozen=True)
class Run:
    encoding: str   # the codec's word
    offset: int     # first element within the shard's flat tensor
    numel: int


Plan = tuple[Run, ...]  # one shard's runs, covering its flat tensor in order


def push_plans(wire: WireConfig, layout: Layout, local_updates: bool) -> list[Plan]:
    """Each shard's runs, as `wire.compression` chooses them over the layout's tensors."""
    sizes = [math.prod(shape) for shape in layout.shapes]
    pieces = [[(sizes[seg.param], seg.length) for seg in segs] for segs in layout.segments]
    plans = []
    for shard_runs, shard_numel in zip(wire.compression_runs(pieces, local_updates), layout.shard_sizes):
        offset, plan = 0, []
        for value, numel in shard_runs:
            plan.append(Run(codec_for_compression(value).name, offset, numel))
            offset += numel
        plans.append(tuple(plan) if plan else (Run(codec_for_compression("none").name, 0, shard_numel),))
    return plans


def single_plans(encodings: Sequence[str], sizes: Sequence[int]) -> list[Plan]:
    """One run per shard: each shard's whole tensor in its one encoding."""
    return [(Run(e, 0, n),) for e, n in zip(encodings, sizes)]


def plan_encoding(plan: Plan) -> str:
    """A push's `encoding` under `plan`: its one run's codec, or RUNS."""
    return plan[0].encoding if len(plan) == 1 else RUNS


def plan_fingerprint(fingerprint: str, plan: Plan) -> str:
    """The register fingerprint of a shard pushed to in `plan`: the layout's own for one
    run (every run without choose_by: tensor registers as before), else one that
    also covers the runs, so a client with another plan is refused."""
    if len(plan) <= 1:
        return fingerprint
    doc = json.dumps([fingerprint, [(r.encoding, r.offset, r.numel) for r in plan]])
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def plan_frames(runs: Any) -> int:
    """Payload frames a RUNS push's header `runs` announces (an unknown encoding counts one)."""
    if not isinstance(runs, (list, tuple)):
        return 0
    total = 0
    for run in runs:
        name = run[0] if isinstance(run, (list, tuple)) and run else None
        codec = CODECS.get(name) if isinstance(name, str) else None
        total += codec.frames if codec is not None else 1
    return total


def decode_runs(plan: Plan, runs: Any, frames: Sequence[Any], out: torch.Tensor) -> torch.Tensor:
    """The dense fp32 gradient a RUNS push carries, into `out` (the shard's flat size),
    checked run by run against `plan`: the header's runs must name the plan's encodings
    with a finite positive scale and an int nnz, and the frames must be exactly theirs."""
    if len(plan) < 2:
        raise ProtocolError(ErrorCode.BAD_ENCODING, "this shard's pushes are one run, not several")
    if not isinstance(runs, (list, tuple)) or len(runs) != len(plan):
        raise ProtocolError(ErrorCode.BAD_FRAMES, f"push announces {len(runs) if isinstance(runs, list) else 0} "
                            f"runs, the shard's plan has {len(plan)}")
    codecs: list[type[Codec]] = []
    for i, (run, header) in enumerate(zip(plan, runs)):
        if not (isinstance(header, (list, tuple)) and len(header) == 3 and header[0] == run.encoding
                and type(header[1]) in (float, int) and type(header[2]) is int):
            raise ProtocolError(ErrorCode.BAD_FIELD, f"run {i} must be [{run.encoding!r}, scale, nnz], got {header!r}")
        if not (math.isfinite(header[1]) and header[1] > 0):  # no codec sends another; NaN would pass as a value
            raise ProtocolError(ErrorCode.BAD_VALUE, f"run {i}'s scale must be finite and > 0, got {header[1]!r}")
        codecs.append(codec_named(run.encoding))
    if len(frames) != sum(c.frames for c in codecs):
        raise ProtocolError(ErrorCode.BAD_FRAMES, f"push has {len(frames)} frames, its runs need "
                            f"{sum(c.frames for c in codecs)}")
    at = 0
    for run, header, codec in zip(plan, runs, codecs):
        view = out[run.offset:run.offset + run.numel]
        _into(view, codec.decode(frames[at:at + codec.frames], run.numel, header[2], float(header[1]), view))
        at += codec.frames
    return out


def _into(view: torch.Tensor, grad: Gradient) -> None:
    """A run's decoded gradient written into its stretch of the shard's buffer."""
    if isinstance(grad, tuple):  # sparse: (indices, values), as the shard would add them
        indices, values = grad
        view.zero_().index_add_(0, indices.long(), values)
    elif grad.data_ptr() != view.data_ptr():  # fp32 decodes to a view of its frame
        view.copy_(grad)
