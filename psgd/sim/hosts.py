"""Hosts in the time model (`sim.hosts`, `sim.placement`): cores, NICs, and what each role costs them.

Each host has `cores` CPU cores, shared by the CPU jobs of its roles (a worker's
loop, its encode and decode, a shard's service, the evaluator) under `sim.sharing`
(psgd.sim.cores: in turns of Linux's slice, processor sharing, or first come first served). Each host has
one NIC, full duplex, shared by every role on it: the Fifos the engine streams
messages through are the host's, not the role's. A message between two roles
of one host crosses no NIC: it is copied at the profile's memory rate.

Costs come from the host profile (psgd.sim.host_profile), never from the run:
- a message, at each end: the profile's framing (fixed + per byte);
- a request, at each end: what the profile's request probe found it costs beyond its parts (ZeroMQ's
  I/O thread, the processes' Python, the copies, waking): the worker's once per push+pull (the
  probe's client sent to one shard; a worker's pushes to all its shards leave and return together),
  part before its pushes leave and the rest after its replies; the shard's in its service, with
  its wake-up when the push finds it asleep;
- a push: its codec's encode on the worker, its decode on the shard;
- a shard's service: the update rule's fixed cost per request + apply per byte;
- a worker's step: the worker loop's own Python, then its compute's host part:
  the whole step on the cores when the worker has no accelerator and no stated
  device time (workers.device_ms), else the step's work (psgd.sim.op_count) on
  the host (a stated device time runs the real model too, and pays the profile's
  worker_step_extra: the worker-loop probe's step beyond its counted work; an
  accelerator's host only dispatches: operations x dispatch cost), beside the
  device time;
- a worker's exchange beyond its parts (the worker-loop probe's worker_exchange_extra),
  with the request's own cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from psgd.config import Config, ConfigError, Role
from psgd.config.sim_hosts import COLOCATED
from psgd.sim.cores import Cores, Due, Job, cores_for
from psgd.sim.host_profile import HostProfile, Linear, load_host_profile
from psgd.sim.op_count import StepWork
from psgd.sim.time_model import Fifo, Link

__all__ = ["Cores", "HostModel"]  # Cores: psgd.sim.cores's, named here too


@dataclass(frozen=True)
class Host:
    index: int
    kind: str
    accelerators: int
    link: Link


class HostModel:
    """The hosts of one run: where each role is, their cores and NICs, and each role's CPU costs."""

    def __init__(self, cfg: Config, profile: HostProfile, shards: int, work: Optional[StepWork], model_bytes: int):
        """`work`: a worker step's (None: no device, its step is the compute model's time); `model_bytes`:
        the model's fp32 bytes."""
        sim = cfg.sim
        self.profile = profile
        self.hosts: list[Host] = []
        first: dict[str, int] = {}
        for kind, spec in sim.hosts.items():
            latency = sim.latency_us if spec.nic_latency_us is None else spec.nic_latency_us
            gbps = sim.bandwidth_gbps if spec.nic_gbps is None else spec.nic_gbps
            first[kind] = len(self.hosts)
            self.hosts += [Host(len(self.hosts), kind, spec.accelerators, Link(latency / 1e6, gbps * 1e9 / 8))
                           for _ in range(spec.count)]
        tick_s = 1 / profile.tick_hz if profile.tick_hz else 0.0
        self.cores = [cores_for(sim.sharing, sim.hosts[h.kind].cores, tick_s) for h in self.hosts]
        self.nic_up = [Fifo() for _ in self.hosts]    # from the host
        self.nic_down = [Fifo() for _ in self.hosts]  # towards it
        workers = cfg.cluster.workers
        kind = sim.worker_kind
        spec = sim.hosts[kind]
        per_host = sim.placement.workers_per_host or spec.accelerators or math.ceil(workers / spec.count)
        self.worker_host = [first[kind] + r // per_host for r in range(workers)]
        used = sorted(set(self.worker_host))
        place = sim.placement
        self.shard_host = [used[s % len(used)] if place.shards == COLOCATED
                           else first[place.shards] + s % sim.hosts[place.shards].count for s in range(shards)]
        self.evaluator_host = used[0] if place.evaluator == COLOCATED else first[place.evaluator]
        # A worker's step on the cores: all of it (no device), or its host part beside a device.
        self.on_device = spec.accelerators > 0 or cfg.workers.device_ms is not None
        if self.on_device and work is None:
            raise ValueError("a worker on a device needs its step's work (psgd.sim.op_count) for its host part")
        # A CPU worker's step beside a stated device time also pays what the profile's worker-loop probe
        # found such a step costs beyond its counted work (it starts after a wait, its caches cold).
        extra = profile.worker_step_extra
        self.host_part_s = (work.host_s(profile) + (extra.seconds(model_bytes) if extra else 0.0)
                            if self.on_device and spec.accelerators == 0 else
                            work.ops * profile.dispatch_us / 1e6 if self.on_device else 0.0)
        self.loop_s = profile.worker_loop_us / 1e6
        self.memory_bytes_per_s = profile.memory_gbytes_per_s * 1e9
        rule = cfg.optimizer.name
        if rule not in profile.apply:
            raise ConfigError("sim.host_profile", f"measures no shard apply for optimizer {rule!r} "
                              f"(it has {', '.join(sorted(profile.apply))}): measure it again")
        self.apply = profile.apply[rule]
        # The simulated instant being handled: no job is issued for an earlier one (set by the engine).
        self.now: Callable[[], float] = lambda: 0.0
        # CPU seconds charged so far to each role, (role, index): what a real run's cpu_s is checked against.
        self.charged: dict[tuple[Role, int], float] = {}

    @classmethod
    def for_run(cls, cfg: Config, shards: int, work: Optional[StepWork], model_bytes: int,
                base_dir: str = ".") -> "HostModel":
        try:
            profile = load_host_profile(cfg.sim.host_profile, base_dir)
        except ValueError as exc:
            raise ConfigError("sim.host_profile", str(exc)) from None
        return cls(cfg, profile, shards, work, model_bytes)

    # ---- where ----------------------------------------------------------------
    def same_host(self, rank: int, shard: int) -> bool:
        return self.worker_host[rank] == self.shard_host[shard]

    def worker_link(self, rank: int) -> Link:
        return self.hosts[self.worker_host[rank]].link

    def shard_link(self, shard: int) -> Link:
        return self.hosts[self.shard_host[shard]].link

    def local_s(self, nbytes: int) -> float:
        """A message between two roles of one host: copied through memory."""
        return nbytes / self.memory_bytes_per_s

    # ---- what it costs ----------------------------------------------------------
    def codec(self, table: dict[str, Linear], encoding: str) -> Linear:
        if encoding not in table:
            raise ConfigError("sim.host_profile", f"measures no codec {encoding!r} (it has "
                              f"{', '.join(sorted(table))}): measure it again with this psgd")
        return table[encoding]

    def request_s(self, nbytes: int) -> tuple[float, float, float]:
        """A push+pull of `nbytes` fp32 bytes beyond its parts (profile.request_*, the worker-loop probe's
        exchange extra; 0 where not measured): the worker's before its push leaves and after its replies
        arrive (split as the request probe found), and each shard's (awake)."""
        p = self.profile
        client = sum(cost.seconds(nbytes) for cost in (p.request_client, p.worker_exchange_extra) if cost is not None)
        shard = p.request_shard.seconds(nbytes) if p.request_shard is not None else 0.0
        return client * p.request_client_send_share, client * (1 - p.request_client_send_share), shard

    def reply_out_s(self, encoding: str, numel: int, wire_bytes: int) -> float:
        """A shard's reply: its parameters encoded (none: as they are), framed and sent."""
        return self.codec(self.profile.encode, encoding).seconds(4 * numel) + self.profile.message.seconds(wire_bytes)

    def reply_in_s(self, encoding: str, numel: int, wire_bytes: int) -> float:
        """A worker's receipt of one reply: received and decoded."""
        return self.profile.message.seconds(wire_bytes) + self.codec(self.profile.decode, encoding).seconds(4 * numel)

    # ---- a worker's step ----------------------------------------------------------
    def step_end(self, rank: int, start: float, device_s: float) -> Due:
        """A step beginning at `start` whose device time is `device_s`: on the cores (no device), or its
        host part on the cores beside the device time; when both are done."""
        if not self.on_device:
            return Due(self.run(Role.WORKER, rank, start, device_s))
        return Due(self.run(Role.WORKER, rank, start, self.host_part_s), floor=start + device_s)

    def host_of(self, role: Role, index: int) -> int:
        if role is Role.WORKER:
            return self.worker_host[index]
        return self.shard_host[index] if role is Role.SERVER else self.evaluator_host

    def run(self, role: Role, index: int, ready: float, busy_s: float) -> Job:
        """A job of `busy_s` of `role` number `index`, ready at `ready` (and, sharing the cores, after the
        role's earlier jobs), on its host's cores."""
        self.charged[role, index] = self.charged.get((role, index), 0.0) + busy_s
        return self.cores[self.host_of(role, index)].book(ready, busy_s, self.now(), (role, index))
