"""The `sim:` section: the virtual cluster's time model (psgd.sim), in hardware terms.

Units are named by what they count: `_gbps` is gigabits per second (links),
`_gbytes_per_s` gigabytes per second (memory, apply and codec rates), `_us`
microseconds, `_ms` milliseconds, `_tflops` 10^12 FLOP per second. Everything
here is a stated number: the same config and seed give the same simulated
times, and this machine is measured only when `compute_ms: measure` asks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Optional, Union

from psgd.config.loader import check as _check
from psgd.config.loader import int_max
from psgd.config.sim_devices import DEVICES, DeviceProfile
from psgd.config.sim_faults import SimFaults
from psgd.config.sim_hosts import COLOCATED, HostKind, Placement, Sharing

__all__ = ["DeviceProfile", "GradientDevice", "HostKind", "Placement", "SimConfig", "MAX_CV", "MAX_SIM_WORKERS",
           "PROFILE_DEVICE"]

# sim.device naming the host profile's measured costs rather than a FLOPs profile.
PROFILE_DEVICE = "profile"

# Largest coefficient of variation accepted for jitter and spread: a lognormal of
# CV 10 already has its median at 1/10 of its mean; far beyond it the variance
# overflows a double (CV ~1.4e154 made every simulated time NaN).
MAX_CV = 10.0
# Workers one simulated run may hold: it executes every one of them in one process
# (their loaders, encoders, shard registrations), and building 1,024 quickstart
# workers and running 2 steps each took 331 s on the 2-core reference machine.
MAX_SIM_WORKERS = 1024


class GradientDevice(str, Enum):
    """Where `--on sim` computes its workers' gradients (psgd.sim.batched)."""
    CPU = "cpu"
    CUDA = "cuda"
    AUTO = "auto"  # cuda where torch sees one, else cpu


@dataclass(frozen=True)
class SimConfig:
    # ---- compute: one worker's forward + backward on its batch ----------------------
    # A number: that many ms per step, whatever `device` says. null: the model's FLOPs
    # on one batch (counted once with torch.utils.flop_counter, forward + backward)
    # on `device`. "measure": timed here (median of `warmup_steps` steps); the figure
    # is written into the run's config.yaml and summary.json, so a rerun repeats it.
    compute_ms: Union[float, Literal["measure"], None] = None
    # Named device profile (psgd.config.sim_devices: cpu, v100, a100, l4, h100, h200,
    # with -tf32 / -bf16 / -fp16 variants) or one defined under `devices`; "profile": the
    # step from sim.host_profile, operations x dispatch cost + each matrix product at the rate
    # measured for its size (psgd.sim.op_count).
    device: str = "cpu"
    # User-defined profiles by name: {peak_tflops, efficiency, step_overhead_us, launch_us, host_gbytes_per_s}.
    devices: dict[str, DeviceProfile] = field(default_factory=dict)
    # Achieved fraction of the profile's peak for this model; null: the profile's own.
    efficiency: Optional[float] = None
    speedup: float = 1.0         # every step's compute time is divided by this (faster hardware)
    # Steps timed for `compute_ms: measure`; bounded so the measurement ends in seconds.
    warmup_steps: int = field(default=5, metadata=int_max(1000))

    # ---- step-time variability (all drawn from run.seed: deterministic) ----------
    # Per step: each step's compute time times a lognormal factor of mean 1 and
    # this coefficient of variation, drawn from (seed, rank, step). 0: none.
    compute_jitter: float = 0.0
    # Per worker, persistent: rank r's every step times one lognormal factor of
    # mean 1 and this CV, drawn once from (seed, rank). 0: all workers equal.
    worker_spread: float = 0.0
    # A real run's step times: a run directory (or its metrics.jsonl; relative to
    # the config file). Its workers' recorded per-step `compute_s` replace compute_ms:
    # simulated rank r takes recorded rank (r mod R)'s times in order, cycling
    # when they run out; divided by `speedup`, then spread and jitter apply as set.
    step_times_from: Optional[str] = None

    # ---- network: every worker has a link, every shard has a link ----------------
    # A message crosses its sender's link and its receiver's link; both limit it:
    # it streams at the slower link's rate, queues behind messages already on
    # either link, and arrives after the sum of the two links' latencies.
    latency_us: float = 10.0      # one-way latency of each link (worker -> shard: 2 x 10 us by default)
    bandwidth_gbps: float = 25.0  # each link's bandwidth, gigabits/s, each direction (full duplex)
    worker_latency_us: Optional[float] = None     # the workers' links only; null: latency_us
    worker_bandwidth_gbps: Optional[float] = None  # the workers' links only; null: bandwidth_gbps
    shard_latency_us: Optional[float] = None      # the shards' links only; null: latency_us
    shard_bandwidth_gbps: Optional[float] = None   # the shards' links only; null: bandwidth_gbps

    # ---- a shard's service: one request at a time ---------------------------------
    request_us: float = 30.0     # shard cost per request (benchmarks/scale-commits: ~30 us at 64 workers)
    # Shard apply rate, gigabytes/s of fp32 gradient (benchmarks/apply: sgd, 10 MB).
    apply_gbytes_per_s: float = 15.0
    # Extra shard time for a request that finds its shard idle (waking it up);
    # requests that queue behind another are served back to back without it. 0: none.
    wake_us: float = 0.0
    # Workers whose steps overlap in simulated time get their gradients in one
    # vmapped call (psgd.sim.batched): the same maths as one by one, equal up to
    # the last bits. `psgd replay` always computes one by one, bit for bit. It pays
    # for some models and costs for others (wide convolutions already near the
    # CPU's peak), so `auto` times both paths on the model at the start
    # (psgd.sim.path_probe) and runs the faster; the choice is written into the
    # run's config.yaml as true or false. Off by default.
    batched: Union[bool, Literal["auto"]] = False
    # Where the workers' gradients are computed: cpu | cuda | auto (cuda where there is one).
    # On cuda every plain step's gradient (batched, or one by one where sim.batched is off or
    # falls back) runs on the device, equal to the CPU's within psgd.sim.batched.RTOL; the
    # choice made is in summary.json's sim_gradients. `psgd replay` always runs on the CPU,
    # bit for bit. cuda on a machine without one is refused before the run starts.
    gradient_device: GradientDevice = GradientDevice.CPU

    # ---- codecs: gigabytes/s of fp32 gradient; null: the codec's own figure (its class's `cost`) ----
    # for wire.compression (measured on one CPU thread; none: free).
    encode_gbytes_per_s: Optional[float] = None  # the worker's encode, before its pushes leave
    decode_gbytes_per_s: Optional[float] = None  # the shard's decode, added to its service

    # ---- hosts: the machines and where each role runs (psgd.config.sim_hosts); {}: no hosts ----
    # By kind name: {count, cores, accelerators, nic_gbps, nic_latency_us}. With hosts, every CPU action is
    # charged on its host's cores, messages between roles on one host go at memory rates, and the
    # roles on a host share its NIC (the per-link keys above then stand for nothing but its defaults).
    hosts: dict[str, HostKind] = field(default_factory=dict)
    placement: Placement = field(default_factory=Placement)  # which hosts run the workers, shards, evaluator
    sharing: Sharing = "rr"      # how a host's cores take jobs: in turns of Linux's slice (psgd.sim.cores; fcfs, ps)
    # The measured host costs hosts are charged with (`psgd sim profile --out FILE`): a shipped name
    # (psgd/sim/profiles: cpu-reference) or a JSON file, relative to the working directory. Also read by
    # device: profile.
    host_profile: str = "cpu-reference"

    # ---- failures: processes killed (and restarted as the real launcher does): sim_faults ----
    faults: SimFaults = field(default_factory=SimFaults)

    # Keys renamed: the loader answers these with the message instead of "unknown key".
    RENAMED_KEYS = {"apply_gbps": "renamed to sim.apply_gbytes_per_s (it always was gigabytes per second, "
                                  "not gigabits: the same value works)",
                    "kills": "moved to sim.faults.kills (the same entries {rank, at_s}: workers killed "
                             "at those times and not restarted, run by the failure model)"}

    def __post_init__(self):
        _check(self.compute_ms is None or self.compute_ms == "measure" or 0 < self.compute_ms, "compute_ms",
               f"must be > 0 ms, null (from the model's FLOPs and sim.device) or measure, got {self.compute_ms}")
        _check(self.device in DEVICES or self.device in self.devices or self.device == PROFILE_DEVICE, "device",
               f"unknown device profile {self.device!r} (shipped: {', '.join(sorted(DEVICES))}; "
               f"{PROFILE_DEVICE}: sim.host_profile's measured costs; or define it under sim.devices)")
        _check(self.efficiency is None or 0 < self.efficiency <= 1, "efficiency",
               f"must be in (0, 1] (a fraction of peak), got {self.efficiency}")
        _check(self.speedup > 0, "speedup", f"must be > 0, got {self.speedup}")
        _check(self.warmup_steps >= 1, "warmup_steps", f"must be >= 1, got {self.warmup_steps}")
        for key in ("compute_jitter", "worker_spread"):
            value = getattr(self, key)
            _check(0 <= value <= MAX_CV, key, f"must be a coefficient of variation in [0, {MAX_CV:g}], got {value}")
        _check(self.step_times_from is None or self.step_times_from != "", "step_times_from",
               "must name a run directory or metrics.jsonl (or be null)")
        for key in ("latency_us", "worker_latency_us", "shard_latency_us", "request_us", "wake_us"):
            value = getattr(self, key)
            _check(value is None or value >= 0, key, f"must be >= 0, got {value}")
        for key in ("bandwidth_gbps", "worker_bandwidth_gbps", "shard_bandwidth_gbps", "apply_gbytes_per_s",
                    "encode_gbytes_per_s", "decode_gbytes_per_s"):
            value = getattr(self, key)
            _check(value is None or value > 0, key, f"must be > 0, got {value}")

        _check(self.host_profile != "", "host_profile", "must name a shipped profile or a file")
        kinds = list(self.hosts)
        for key in ("workers", "shards", "evaluator"):
            value = getattr(self.placement, key)
            allowed = ([""] if key == "workers" else [COLOCATED]) + kinds
            _check(not self.hosts or value in allowed, f"placement.{key}",
                   f"{value!r} is not a host kind of sim.hosts ({', '.join(kinds)})"
                   + ("" if key == "workers" else f" nor {COLOCATED}"))

    @property
    def worker_kind(self) -> str:
        """The host kind running the workers (with hosts)."""
        return self.placement.workers or next(iter(self.hosts))

    def worker_slots(self) -> Optional[int]:
        """How many workers the hosts place, or None when that is not bounded (workers spread evenly)."""
        kind = self.hosts[self.worker_kind]
        per_host = self.placement.workers_per_host or kind.accelerators or None
        return None if per_host is None else per_host * kind.count

    def profile(self) -> DeviceProfile:
        """The device profile in force (user-defined names shadow shipped ones). `profile`: the
        step comes from sim.host_profile (psgd.sim.compute), on a device in host memory."""
        if self.device == PROFILE_DEVICE and self.device not in self.devices:
            return DEVICES["cpu"]
        return self.devices.get(self.device) or DEVICES[self.device]
