"""The virtual cluster's time model (the `sim:` section), in seconds.

Every worker and every shard has a link of its own, full duplex, and each
direction of it is a FIFO (except a worker's pushes of one step, which leave
together and share its link fairly): a message starts when its sender's link is free,
streams at the slower of the two links it crosses (it cannot leave the
sender's faster than its sender's link nor enter the receiver's faster than
the receiver's), holds each link for its bytes / that link's bandwidth, and
arrives after both links' latencies. So one worker pushing to 8 shards is
bounded by its own link, and 64 workers pushing to one shard by the shard's.
A shard serves one request at a time: a fixed per-request cost, the decode of
an encoded gradient and the apply of the fp32 gradient. Around its compute a
worker pays its encode and, on an accelerator, the device-to-host copy of the
gradient and the host-to-device copy of the parameters it pulled, and the decode
of those parameters when they come in a reply encoding (wire.compression.replies;
the shard's encode of them is part of the pull half, which is not modelled).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence

from psgd.config import Config, ConfigError
from psgd.config.sim import SimConfig
from psgd.sim.codec_cost import codec_rates
from psgd.wire.codecs.runs import RUNS, Plan, plan_encoding
from psgd.wire.replies import reply_encoding

__all__ = ["Fifo", "Link", "TimeModel", "ring_allreduce_s", "stream", "stream_together"]

# A shard free for less than this when a request arrives is still awake: a
# request that arrives as the last one ends is served back to back, whatever
# the rounding of the two sums of floats that make those instants.
AWAKE_S = 1e-9


@dataclass
class Fifo:
    """One resource serving one job at a time in arrival order."""
    free_at: float = 0.0

    def occupy(self, ready: float, busy_s: float) -> float:
        """A job ready at `ready` that takes `busy_s`: returns its end."""
        self.free_at = max(ready, self.free_at) + busy_s
        return self.free_at


@dataclass(frozen=True)
class Link:
    latency_s: float     # one way
    bytes_per_s: float   # each direction

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_s


def stream(out: Fifo, out_link: Link, into: Fifo, into_link: Link, ready: float, nbytes: int) -> float:
    """A message of `nbytes` ready at `ready` leaves through the sender's link
    (`out`) into the receiver's (`into`): returns when it has fully arrived.
    Cut-through: the receiver's link starts taking it when the sender's does
    (or when it is free), and neither link finishes before the other's rate allows."""
    start = max(ready, out.free_at)
    out.free_at = start + out_link.transfer_s(nbytes)
    into_start = max(start, into.free_at)
    into.free_at = max(into_start + into_link.transfer_s(nbytes), out.free_at)
    return into.free_at + out_link.latency_s + into_link.latency_s


def stream_together(out: Fifo, out_link: Link, intos: list[tuple[Fifo, Link]], ready: float,
                    sizes: list[int]) -> list[float]:
    """Messages that leave one sender at once, one to each receiver (a worker's pushes to
    every shard): they share the sender's link fairly, as concurrent TCP flows do, so a
    message of size s finishes when sum(min(s, s_j)) bytes have left, and the link is
    free once all have. Each then enters its receiver's link as `stream` says.
    Returns each message's arrival."""
    start = max(ready, out.free_at)
    out.free_at = start + out_link.transfer_s(sum(sizes))
    arrivals = []
    for (into, into_link), size in zip(intos, sizes):
        left = start + out_link.transfer_s(sum(min(size, other) for other in sizes))
        into_start = max(start, into.free_at)
        into.free_at = max(into_start + into_link.transfer_s(size), left)
        arrivals.append(into.free_at + out_link.latency_s + into_link.latency_s)
    return arrivals


def ring_allreduce_s(nbytes: int, workers: int, latency_s: float, bytes_per_s: float) -> float:
    """Ring all-reduce: 2(W-1) steps, each sending nbytes / W over one link."""
    if workers <= 1:
        return 0.0
    steps = 2 * (workers - 1)
    return steps * (latency_s + nbytes / workers / bytes_per_s)


def _rate(gbytes_per_s: Optional[float]) -> Optional[float]:
    return None if gbytes_per_s is None else gbytes_per_s * 1e9


@dataclass(frozen=True)
class TimeModel:
    compute_s: float      # one step's forward+backward, after the speed-up
    worker_link: Link
    shard_link: Link
    request_s: float      # shard fixed cost per request
    apply_bytes_per_s: float
    jitter_cv: float = 0.0  # coefficient of variation of each step's compute time
    wake_s: float = 0.0     # shard cost added when a request finds it idle
    spread_cv: float = 0.0  # coefficient of variation of the workers' persistent speeds
    encode_bytes_per_s: Optional[float] = None  # None: free (fp32 travels as it is)
    decode_bytes_per_s: Optional[float] = None
    host_bytes_per_s: Optional[float] = None    # host <-> device copies; None: none (a CPU worker)
    reply_decode_bytes_per_s: Optional[float] = None  # a worker decoding its replies; None: fp32 replies
    # Per shard, (encode s, decode s) of its push when the shards' codecs differ (wire.compression chooses
    # per shard or per tensor): each run's elements at its own codec's rates (`for_plans`). Empty: every
    # push at the rates above.
    push_codec_s: tuple[tuple[float, float], ...] = ()

    @classmethod
    def for_run(cls, cfg: Config, compute_ms: float, plans: Sequence[Plan]) -> "TimeModel":
        """The time model of a run: its `sim:` section, its replies' encoding and its pushes'
        `plans` (each shard's runs, psgd.wire.codecs.runs.push_plans: the ones its real
        client and shards use), charged as `for_plans` says."""
        return cls.from_config(cfg.sim, compute_ms, reply=reply_encoding(cfg.wire)).for_plans(plans, cfg.sim)

    @classmethod
    def from_config(cls, sim: SimConfig, compute_ms: float, encoding: str = "none",
                    reply: str = "none") -> "TimeModel":
        """`compute_ms`: the step time before sim.speedup (psgd.sim.compute resolves it);
        `encoding`: one push encoding for every shard (a run's own: `for_run`); `reply`: its
        replies' (psgd.wire.replies.reply_encoding: decoded at the codec's own rate, as
        sim.decode_gbytes_per_s is the shards'). Raises ConfigError naming sim when a combination
        of finite keys gives a time that is not finite."""
        def link(latency_us: Optional[float], gbps: Optional[float]) -> Link:
            latency_us = sim.latency_us if latency_us is None else latency_us
            gbps = sim.bandwidth_gbps if gbps is None else gbps
            return Link(latency_us / 1e6, gbps * 1e9 / 8)
        encode, decode = codec_rates(encoding, sim.encode_gbytes_per_s, sim.decode_gbytes_per_s)
        model = cls(compute_ms / 1e3 / sim.speedup, link(sim.worker_latency_us, sim.worker_bandwidth_gbps),
                    link(sim.shard_latency_us, sim.shard_bandwidth_gbps), sim.request_us / 1e6,
                    sim.apply_gbytes_per_s * 1e9, sim.compute_jitter, sim.wake_us / 1e6, sim.worker_spread,
                    encode, decode, _rate(sim.profile().host_gbytes_per_s), codec_rates(reply, None, None)[1])
        return model._checked(sim, compute_ms)

    def for_plans(self, plans: Sequence[Plan], sim: SimConfig) -> "TimeModel":
        """This model charging each shard's push its codecs' time (psgd.wire.codecs.runs), at
        each codec's rates (sim's figures where it gives them): when every shard is pushed in
        one run of one encoding, that encoding's rates for every push (summed over the shards
        as one gradient, as a one-codec run always was); else, per shard, the elements of each
        of its runs at that run's codec's rates (a shard of its own codec, or a push in runs)."""
        encodings = {plan_encoding(plan) for plan in plans}
        if len(encodings) == 1 and RUNS not in encodings:
            encode, decode = codec_rates(encodings.pop(), sim.encode_gbytes_per_s, sim.decode_gbytes_per_s)
            return replace(self, encode_bytes_per_s=encode, decode_bytes_per_s=decode,
                           push_codec_s=())._checked(sim, self.compute_s * 1e3 * sim.speedup)
        costs = []
        for plan in plans:
            encode_s = decode_s = 0.0
            for run in plan:
                encode, decode = codec_rates(run.encoding, sim.encode_gbytes_per_s, sim.decode_gbytes_per_s)
                encode_s += 4 * run.numel / encode if encode else 0.0
                decode_s += 4 * run.numel / decode if decode else 0.0
            costs.append((encode_s, decode_s))
        return replace(self, encode_bytes_per_s=None, decode_bytes_per_s=None,
                       push_codec_s=tuple(costs))._checked(sim, self.compute_s * 1e3 * sim.speedup)

    def _checked(self, sim: SimConfig, compute_ms: float) -> "TimeModel":
        """Itself, unless a time is not a finite number >= 0 (ConfigError naming sim)."""
        for f in fields(self):
            value = getattr(self, f.name)
            parts = ((value.latency_s, value.bytes_per_s) if isinstance(value, Link)
                     else tuple(t for pair in value for t in pair) if f.name == "push_codec_s" else (value,))
            for v in parts:
                if v is not None and not (math.isfinite(v) and v >= 0):
                    raise ConfigError("sim", f"gives a {f.name} of {v} (compute_ms {compute_ms}, "
                                      f"speedup {sim.speedup}): every time must be a finite number")
        return self

    # ---- the path between a worker and a shard --------------------------------
    @property
    def latency_s(self) -> float:
        """One way, worker to shard: both links' latencies."""
        return self.worker_link.latency_s + self.shard_link.latency_s

    @property
    def bytes_per_s(self) -> float:
        """What one message streams at alone: the slower link's rate."""
        return min(self.worker_link.bytes_per_s, self.shard_link.bytes_per_s)

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_s

    # ---- a shard ----------------------------------------------------------------
    @staticmethod
    def finds_idle(free_at: float, t: float) -> bool:
        """Whether a request arriving at `t` finds a shard free since `free_at` asleep."""
        return t - free_at > AWAKE_S

    def service_s(self, numel: int, idle: bool = False, shard: Optional[int] = None) -> float:
        """A shard's time for one push of `numel` values (decoded, then applied as fp32);
        `idle`: it found the shard idle; `shard`: which one (its runs' decode, `for_plans`:
        needed when the shards' codecs differ)."""
        if self.push_codec_s:
            if shard is None:
                raise ValueError("the shards' push codecs differ: name the shard whose push is served")
            decode_s = self.push_codec_s[shard][1]
        else:
            decode_s = 4 * numel / self.decode_bytes_per_s if self.decode_bytes_per_s else 0.0
        return self.request_s + decode_s + 4 * numel / self.apply_bytes_per_s + (self.wake_s if idle else 0.0)

    # ---- a worker, around its compute -------------------------------------------
    def before_push_s(self, shard_numels: list[int], shards: Optional[Sequence[int]] = None) -> float:
        """After the backward pass: the gradient copied to the host, then encoded per shard
        (`shards`: which ones, for their runs' encode, `for_plans`: needed when the shards'
        codecs differ)."""
        nbytes = 4 * sum(shard_numels)
        copy_s = nbytes / self.host_bytes_per_s if self.host_bytes_per_s else 0.0
        if self.push_codec_s:
            if shards is None:
                raise ValueError("the shards' push codecs differ: name the shards pushed to")
            return copy_s + sum(self.push_codec_s[s][0] for s in shards)
        return copy_s + (nbytes / self.encode_bytes_per_s if self.encode_bytes_per_s else 0.0)

    def after_pull_s(self, numel: int) -> float:
        """Pulled parameters decoded (a reply encoding) and copied to the device before the next step computes."""
        decode_s = 4 * numel / self.reply_decode_bytes_per_s if self.reply_decode_bytes_per_s else 0.0
        return decode_s + (4 * numel / self.host_bytes_per_s if self.host_bytes_per_s else 0.0)

    def allreduce_s(self, nbytes: int, workers: int) -> float:
        """The baseline's ring over the workers' links (each hop crosses two)."""
        return ring_allreduce_s(nbytes, workers, 2 * self.worker_link.latency_s, self.worker_link.bytes_per_s)
