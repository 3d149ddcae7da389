"""A host's measured costs (`psgd sim profile`), as the time model reads them.

Every figure is a measurement of one process on one machine, with the machine
and the method written beside it (`measured_on`), so a simulated run says
where its host costs come from. A profile is a JSON file; `sim.host_profile`
names a shipped one (psgd/sim/profiles/NAME.json) or a path.

Costs are linear in bytes where bytes decide them: a fixed part per call and a
rate, fitted on two sizes measured in the same process (`Linear`).
"""
from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from psgd.config.operations import CODEC_WORDS_BEFORE

__all__ = ["HostProfile", "Linear", "load_host_profile", "PROFILES_DIR"]

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Linear:
    """fixed_us + nbytes / gbytes_per_s: one call's CPU time on `nbytes`."""
    fixed_us: float
    gbytes_per_s: float

    def seconds(self, nbytes: float) -> float:
        return self.fixed_us / 1e6 + nbytes / (self.gbytes_per_s * 1e9)

    @classmethod
    def fit(cls, small: tuple[int, float], large: tuple[int, float]) -> "Linear":
        """Through two (bytes, seconds) points; the slope is kept positive and the fixed part >= 0."""
        (b0, s0), (b1, s1) = small, large
        per_byte = max((s1 - s0) / (b1 - b0), 1e-13)
        return cls(round(max(s0 - per_byte * b0, 0.0) * 1e6, 3), round(1 / per_byte / 1e9, 4))


def _at_rate(size: float, sizes: tuple[int, ...], rates: tuple[float, ...], hold: bool = True) -> float:
    """Seconds of one call of `size` (FLOPs or bytes): its time interpolated linearly between the two
    sizes measured around it (a fixed cost per call plus a rate, as each stretch between two
    measurements is); above the largest, at the largest's rate; below the smallest, the smallest's
    time when `hold` (a kernel's call costs no less), else at the smallest's rate."""
    if size <= 0:
        return 0.0
    i = bisect.bisect_left(sizes, size)
    if i == len(sizes):
        return size / rates[-1]
    if sizes[i] == size or (i == 0 and hold):
        return sizes[i] / rates[i]
    if i == 0:
        return size / rates[0]
    t0, t1 = sizes[i - 1] / rates[i - 1], sizes[i] / rates[i]
    return t0 + (size - sizes[i - 1]) * (t1 - t0) / (sizes[i] - sizes[i - 1])


def _by_positions(flops: float, positions: float, sizes: tuple[int, ...], rates: tuple[float, ...],
                  at: tuple[int, ...]) -> float:
    """A convolution's seconds from probes measured at several output-position counts (`at`, one per
    probe; empty: one count). At each count, the time a convolution of this one's width (its FLOPs per
    output position, so within the widths probed) takes there (_at_rate); between the two counts
    around `positions`, interpolated linearly in positions (a fixed cost plus a cost per position, as
    each stretch is); below the smallest count, its time (a call costs no less); above the largest,
    at its rate."""
    if not at or positions <= 0:
        return _at_rate(flops, sizes, rates)
    counts = sorted(set(at))

    def at_count(count: int) -> float:
        pairs = sorted((f, r) for f, r, a in zip(sizes, rates, at) if a == count)
        return _at_rate(flops * count / positions, tuple(f for f, _ in pairs), tuple(r for _, r in pairs))
    i = bisect.bisect_left(counts, positions)
    if i == 0:
        return at_count(counts[0])
    if i == len(counts):
        return at_count(counts[-1]) * positions / counts[-1]
    lo, hi = counts[i - 1], counts[i]
    return at_count(lo) + (positions - lo) * (at_count(hi) - at_count(lo)) / (hi - lo)


# The rate tables measured by size beyond the products': each NAME (sizes) beside NAME_per_s (rates).
_SIZES = ("conv_flops", "conv_input_gradient_flops", "conv_weight_gradient_flops", "attention_flops",
          "attention_backward_flops", "memory_bytes")
# Keys an earlier profile wrote, as read now: its one gradient table was the weight's.
_RENAMED = {"conv_gradient_flops": "conv_weight_gradient_flops", "conv_gradient_positions": "conv_positions"}


def _current_key(key: str) -> str:
    base = key.removesuffix("_per_s")
    return _RENAMED.get(base, base) + key[len(base):]


@dataclass(frozen=True)
class HostProfile:
    measured_on: str                 # the machine, torch version and date, as `psgd sim profile` saw them
    device: str                      # cpu or cuda: where the matrix products and launches were timed
    # One message's framing at each end (header packed, frames sent and received over TCP loopback,
    # header parsed): half the measured round trip's CPU at each end.
    message: Linear
    # Per codec word: its encode (worker) and decode (shard) of an fp32 gradient.
    encode: dict[str, Linear]
    decode: dict[str, Linear]
    # Per update rule (optimizer.name): a shard's service of one fp32 push, its request and apply.
    apply: dict[str, Linear]
    memory_gbytes_per_s: float       # a same-host message's copy rate (one large tensor copy)
    dispatch_us: float               # one counted operation of a training step (cpu: dispatch + autograd; cuda: launch)
    # Matrix products: FLOPs of one square product (2 n^3) and the FLOP/s achieved at it, ascending.
    matmul_flops: tuple[int, ...]
    matmul_flops_per_s: tuple[float, ...]
    worker_loop_us: float            # the worker loop's own Python per step (its event record, its batch)
    # Convolutions, as the matrix products: FLOPs of one (forward) and the FLOP/s achieved (() : at the
    # matrix products' rates). A convolution's rate depends on its output positions per call (batch x
    # output length: the rows of its inner product) as well as its width: each probe's positions beside
    # it (() : every probe at one count).
    conv_flops: tuple[int, ...] = ()
    conv_flops_per_s: tuple[float, ...] = ()
    conv_positions: tuple[int, ...] = ()
    # The input's and the weight's gradient of a convolution's backward, probed at the forward's shapes
    # (conv_positions); () : at the forward's rates.
    conv_input_gradient_flops: tuple[int, ...] = ()
    conv_input_gradient_flops_per_s: tuple[float, ...] = ()
    conv_weight_gradient_flops: tuple[int, ...] = ()
    conv_weight_gradient_flops_per_s: tuple[float, ...] = ()
    # Attention (scaled dot product), forward and backward, as the products; () : at the products' rates.
    attention_flops: tuple[int, ...] = ()
    attention_flops_per_s: tuple[float, ...] = ()
    attention_backward_flops: tuple[int, ...] = ()
    attention_backward_flops_per_s: tuple[float, ...] = ()
    # Every other operation (elementwise, reductions, copies, norms): bytes read and written by one call,
    # and the rate they stream at beyond the call's dispatch; () : not measured, costed at nothing.
    memory_bytes: tuple[int, ...] = ()
    memory_bytes_per_s: tuple[float, ...] = ()
    pass_us: float = 0.0             # one training pass (forward and its backward) beyond its operations
    # A real request beyond its parts above (psgd.sim.profile_requests): what one push+pull costs the
    # worker's and the shard's processes besides framing, codec and update rule (waking on each message,
    # ZeroMQ's I/O thread, the client's Python, the gradient's and parameters' copies), fixed + per fp32
    # byte; the worker's share spent before its request leaves; the shard's more when it was asleep.
    # None (and 0): not measured.
    request_client: Optional[Linear] = None
    request_client_send_share: float = 0.5
    request_shard: Optional[Linear] = None
    request_shard_wake_us: float = 0.0
    # The real worker loop (psgd.sim.profile_worker: the worker role run against a real shard, each step
    # waiting out a stated device time) beyond what the parts above charge it, per fp32 byte of its model:
    # in its step (beside the device time: the batch, a step's start after the wait, its caches cold) and
    # in its exchange (flattening the gradients, loading the parameters). None: not measured (nothing).
    worker_step_extra: Optional[Linear] = None
    worker_exchange_extra: Optional[Linear] = None
    host_to_device_gbytes_per_s: Optional[float] = None  # cuda only
    device_to_host_gbytes_per_s: Optional[float] = None
    # The kernel's scheduler tick (CONFIG_HZ): a thread that has used its slice is preempted at the next
    # tick (sim.sharing: rr). None: not known (preempted as its slice ends).
    tick_hz: Optional[float] = None
    notes: dict = field(default_factory=dict)

    @property
    def peak_flops_per_s(self) -> float:
        return max(self.matmul_flops_per_s)

    def matmul_s(self, flops: float) -> float:
        """One matrix product of `flops`, at the times measured for products around its size (_at_rate)."""
        return _at_rate(flops, self.matmul_flops, self.matmul_flops_per_s)

    def conv_s(self, flops: float, positions: float = 0) -> float:
        """One convolution of `flops` over `positions` output positions, at the convolutions' measured
        times (_by_positions; else the products')."""
        if not self.conv_flops:
            return self.matmul_s(flops)
        return _by_positions(flops, positions, self.conv_flops, self.conv_flops_per_s, self.conv_positions)

    def conv_input_gradient_s(self, flops: float, positions: float = 0) -> float:
        """The input's gradient of a convolution's backward, at its measured times (else the forward's)."""
        if not self.conv_input_gradient_flops:
            return self.conv_s(flops, positions)
        return _by_positions(flops, positions, self.conv_input_gradient_flops,
                             self.conv_input_gradient_flops_per_s, self.conv_positions)

    def conv_weight_gradient_s(self, flops: float, positions: float = 0) -> float:
        """The weight's gradient of a convolution's backward, at its measured times (else the forward's)."""
        if not self.conv_weight_gradient_flops:
            return self.conv_s(flops, positions)
        return _by_positions(flops, positions, self.conv_weight_gradient_flops,
                             self.conv_weight_gradient_flops_per_s, self.conv_positions)

    def attention_s(self, flops: float) -> float:
        """One attention, forward, at its measured rates (else the products')."""
        if not self.attention_flops:
            return self.matmul_s(flops)
        return _at_rate(flops, self.attention_flops, self.attention_flops_per_s)

    def attention_backward_s(self, flops: float) -> float:
        if not self.attention_backward_flops:
            return self.attention_s(flops)
        return _at_rate(flops, self.attention_backward_flops, self.attention_backward_flops_per_s)

    def worker_exchange_s(self, nbytes: float) -> float:
        """A worker's CPU for one fp32 push+pull of `nbytes` with one shard, as the time model charges its
        parts (psgd.sim.host_clock: the push encoded and framed, the request, the reply framed and decoded)."""
        request = self.request_client.seconds(nbytes) if self.request_client is not None else 0.0
        return (self.encode["none"].seconds(nbytes) + 2 * self.message.seconds(nbytes) + request
                + self.decode["none"].seconds(nbytes))

    def memory_s(self, nbytes: float) -> float:
        """One operation that streams `nbytes` (read and written), beyond its dispatch."""
        if not self.memory_bytes:
            return 0.0
        return _at_rate(nbytes, self.memory_bytes, self.memory_bytes_per_s, hold=False)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "HostProfile":
        d = {_current_key(k): v for k, v in d.items()}
        lin = lambda v: Linear(float(v["fixed_us"]), float(v["gbytes_per_s"]))  # noqa: E731
        return cls(measured_on=str(d["measured_on"]), device=str(d["device"]), message=lin(d["message"]),
                   encode={CODEC_WORDS_BEFORE.get(k, k): lin(v) for k, v in d["encode"].items()},
                   decode={CODEC_WORDS_BEFORE.get(k, k): lin(v) for k, v in d["decode"].items()},
                   apply={k: lin(v) for k, v in d["apply"].items()},
                   memory_gbytes_per_s=float(d["memory_gbytes_per_s"]), dispatch_us=float(d["dispatch_us"]),
                   matmul_flops=tuple(int(x) for x in d["matmul_flops"]),
                   matmul_flops_per_s=tuple(float(x) for x in d["matmul_flops_per_s"]),
                   worker_loop_us=float(d["worker_loop_us"]),
                   **{k: tuple(int(x) for x in d.get(k, ())) for k in _SIZES},
                   **{k + "_per_s": tuple(float(x) for x in d.get(k + "_per_s", ())) for k in _SIZES},
                   conv_positions=tuple(int(x) for x in d.get("conv_positions", ())),
                   pass_us=float(d.get("pass_us", 0.0)),
                   request_client=lin(d["request_client"]) if d.get("request_client") else None,
                   request_client_send_share=float(d.get("request_client_send_share", 0.5)),
                   request_shard=lin(d["request_shard"]) if d.get("request_shard") else None,
                   request_shard_wake_us=float(d.get("request_shard_wake_us", 0.0)),
                   worker_step_extra=lin(d["worker_step_extra"]) if d.get("worker_step_extra") else None,
                   worker_exchange_extra=lin(d["worker_exchange_extra"]) if d.get("worker_exchange_extra") else None,
                   host_to_device_gbytes_per_s=d.get("host_to_device_gbytes_per_s"),
                   device_to_host_gbytes_per_s=d.get("device_to_host_gbytes_per_s"),
                   tick_hz=float(d["tick_hz"]) if d.get("tick_hz") else None, notes=d.get("notes", {}))


def load_host_profile(name_or_path: str, base_dir: str = ".") -> HostProfile:
    """A shipped profile by name (psgd/sim/profiles/NAME.json) or a JSON file (relative to
    `base_dir`). Raises ValueError with one line saying what is wrong."""
    shipped = PROFILES_DIR / f"{name_or_path}.json"
    path = shipped if shipped.is_file() else Path(base_dir, name_or_path).expanduser()
    try:
        data = json.loads(path.read_text())
        return HostProfile.from_dict(data)
    except OSError as exc:
        names = sorted(p.stem for p in PROFILES_DIR.glob("*.json"))
        raise ValueError(f"cannot read host profile {path} ({exc.strerror or exc}); shipped: {', '.join(names)}") \
            from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a host profile (psgd sim profile --json writes one): {exc!r}") from None
