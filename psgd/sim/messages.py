"""What travels between the virtual cluster's workers and shards: a push as the
shard receives it, a reply as the worker receives it, and the decoding a shard
applies to a push (the same decoders and fp32 arithmetic as the real shard's)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from psgd.wire.codecs import Encoded, Gradient, codec_named
from psgd.wire.codecs.runs import RUNS, Plan, decode_runs
from psgd.wire.replies import ReplyEncoder, decode_reply, reply_nbytes

__all__ = ["Push", "Read", "Reply", "PulledParams", "decode_push"]


def decode_push(enc: Encoded, numel: int, owned: Optional[torch.Tensor] = None, plan: Plan = ()) -> Gradient:
    """The gradient a shard decodes from an encoded push, owned by the caller
    (the encoder's buffers are reused at its next step). Same decoders and the
    same fp32 arithmetic as the shard's push handler. `owned`: the fp32
    gradient that was encoded, when nothing else will write to it: an fp32
    push decodes to its very bytes, so it is used as it is. `plan`: the shard's push runs
    (psgd.wire.codecs.runs), for a push in runs."""
    if enc.encoding == RUNS:
        return decode_runs(plan, enc.runs, enc.frames, torch.empty(numel))
    codec = codec_named(enc.encoding)
    if owned is not None and codec.dense and codec.wire_dtype == torch.float32:
        return owned
    out = torch.empty(numel) if codec.dense else None
    grad = codec.decode(enc.frames, numel, enc.nnz, enc.scale, out)
    if isinstance(grad, tuple):
        return grad[0].clone(), grad[1].clone()
    if grad is out or out is None:  # a non-dense codec that decodes dense (int8, ...) made its own tensor
        return grad
    return out.copy_(grad)  # an fp32 payload decodes to a view of the frame


class PulledParams:
    """One shard's parameters as its workers receive them in the reply encoding
    (wire.compression.replies, not fp32): encoded by the real shard's ReplyEncoder and
    decoded by the client's decoder, once per version (every worker that reads a
    version shares the decoded tensor, which nothing writes to)."""

    def __init__(self, encoding: str):
        self.encoder = ReplyEncoder(encoding)
        self._last: Optional[tuple[int, torch.Tensor]] = None

    def __call__(self, params: torch.Tensor, version: int) -> torch.Tensor:
        if self._last is None or self._last[0] != version:
            enc = self.encoder.encode(params, version)
            n = params.numel()
            self._last = (version, decode_reply(enc.encoding, n, enc.scale, torch.empty(n), frames=enc.frames))
        return self._last[1]


@dataclass
class Push:
    """One worker's push to one shard, as the shard receives it."""
    rank: int
    shard: int
    seq: int
    clock: int
    read_version: int
    grad: Gradient
    wire_bytes: int
    step_s: float = 0.0
    steps: int = 1   # training steps behind it (a local-update round's)
    gen: int = 0     # the sender's incarnation (psgd.sim.faults: a killed worker's pushes are lost)
    shard_gen: int = 0  # the receiving shard's incarnation when it was sent (or taken into service)
    request: int = 0    # the worker's request it belongs to (a repeat after a re-join is a new one)


@dataclass
class Reply:
    """A shard's answer to a worker's pull."""
    rank: int
    shard: int
    params: torch.Tensor  # shared by every worker that read this version
    version: int
    clock: int
    min_clock: int
    fastest_step_s: float = 0.0  # local.dynamic: the fastest worker's time per step, as the shard sees it
    read: Optional["Read"] = None  # marks `params` in use until the worker has stepped on them
    gen: int = 0        # the worker incarnation it answers (psgd.sim.faults)
    shard_gen: int = 0  # the shard incarnation that sent it
    request: int = 0    # the worker's request it answers
    encoding: str = "none"  # the parameters' encoding on the wire (wire.compression.replies)
    welcome: bool = False  # a registration's answer (not counted as pulled, as a real worker does not)
    held_s: float = 0.0    # simulated seconds the pull stayed parked on the shard (a barrier, a bound)

    @property
    def wire_bytes(self) -> int:
        """The parameter bytes it carries, counted as a real worker counts them."""
        return reply_nbytes(self.encoding, self.params.numel())


class Read:
    """A reply's parameters still to be read by its worker: the tracker
    ShardState.sending takes (a real shard's send in flight). The virtual
    clock never waits: the shard copies if the read is not done."""
    __slots__ = ("done",)

    def __init__(self):
        self.done = False

    def wait(self, timeout_s: float) -> bool:
        return self.done
