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
import math
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


def _at_rate(flops: float, sizes: tuple[int, ...], rates: tuple[float, ...]) -> float:
    if flops <= 0:
        return 0.0
    i = bisect.bisect_left(sizes, flops)
    if i == 0:
        rate = rates[0]
    elif i == len(sizes):
        rate = rates[-1]
    else:
        x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
        w = (math.log(flops) - x0) / (x1 - x0)
        rate = rates[i - 1] * (1 - w) + rates[i] * w
    return flops / rate


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
    # Convolutions, as the matrix products: FLOPs of one (forward) and the FLOP/s achieved; () : at the
    # matrix products' rates.
    conv_flops: tuple[int, ...] = ()
    conv_flops_per_s: tuple[float, ...] = ()
    host_to_device_gbytes_per_s: Optional[float] = None  # cuda only
    device_to_host_gbytes_per_s: Optional[float] = None
    notes: dict = field(default_factory=dict)

    @property
    def peak_flops_per_s(self) -> float:
        return max(self.matmul_flops_per_s)

    def matmul_s(self, flops: float) -> float:
        """One matrix product of `flops` at the rate measured for products of that size
        (interpolated in log FLOPs between the sizes measured; the ends held)."""
        return _at_rate(flops, self.matmul_flops, self.matmul_flops_per_s)

    def conv_s(self, flops: float) -> float:
        """One convolution of `flops`, at the convolutions' measured rates (else the products')."""
        if not self.conv_flops:
            return self.matmul_s(flops)
        return _at_rate(flops, self.conv_flops, self.conv_flops_per_s)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "HostProfile":
        lin = lambda v: Linear(float(v["fixed_us"]), float(v["gbytes_per_s"]))  # noqa: E731
        return cls(measured_on=str(d["measured_on"]), device=str(d["device"]), message=lin(d["message"]),
                   encode={CODEC_WORDS_BEFORE.get(k, k): lin(v) for k, v in d["encode"].items()},
                   decode={CODEC_WORDS_BEFORE.get(k, k): lin(v) for k, v in d["decode"].items()},
                   apply={k: lin(v) for k, v in d["apply"].items()},
                   memory_gbytes_per_s=float(d["memory_gbytes_per_s"]), dispatch_us=float(d["dispatch_us"]),
                   matmul_flops=tuple(int(x) for x in d["matmul_flops"]),
                   matmul_flops_per_s=tuple(float(x) for x in d["matmul_flops_per_s"]),
                   worker_loop_us=float(d["worker_loop_us"]),
                   conv_flops=tuple(int(x) for x in d.get("conv_flops", ())),
                   conv_flops_per_s=tuple(float(x) for x in d.get("conv_flops_per_s", ())),
                   host_to_device_gbytes_per_s=d.get("host_to_device_gbytes_per_s"),
                   device_to_host_gbytes_per_s=d.get("device_to_host_gbytes_per_s"), notes=d.get("notes", {}))


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
