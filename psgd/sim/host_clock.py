"""The engine's host-side times (psgd.sim.hosts) for one run: each CPU job at its instant.

Every cost of a run's messages is fixed by its plans and sizes, so each is
computed once here: a worker's pushes per step, each shard's service of one
push, each shard's reply out and each worker's reply in. The engine asks
`step_ready`, `service_end`, `reply_leaves`, `reply_taken` and `params_in_hand`
at the instants it reaches them; none of them is called without hosts.
"""
from __future__ import annotations

from typing import Callable, Optional

from psgd.config import Config, Role
from psgd.sim.cores import Due
from psgd.sim.hosts import HostModel
from psgd.sim.time_model import Fifo, TimeModel, stream
from psgd.wire.codecs import CodecOptions, codec_named
from psgd.wire.codecs.runs import Plan

__all__ = ["HostClock", "host_clock_for"]


def _wire_bytes(plan: Plan, options: CodecOptions) -> int:
    return round(sum(codec_named(r.encoding).bytes_per_element(options) * r.numel for r in plan))


class HostClock:
    def __init__(self, cfg: Config, model: HostModel, plans: list[Plan], shard_sizes: list[int],
                 reply_encoding: str, time: TimeModel):
        self.model, self.time = model, time
        self.total = sum(shard_sizes)
        options = CodecOptions(topk_ratio=cfg.wire.topk_ratio)
        wire = [_wire_bytes(plan, options) for plan in plans]
        self.push_out_s = sum(sum(model.codec(model.profile.encode, r.encoding).seconds(4 * r.numel) for r in plan)
                              + model.profile.message.seconds(b) for plan, b in zip(plans, wire))
        self.push_in_s = [model.profile.message.seconds(b) + model.apply.seconds(4 * n)
                          + sum(model.codec(model.profile.decode, r.encoding).seconds(4 * r.numel) for r in plan)
                          for plan, b, n in zip(plans, wire, shard_sizes)]
        reply_wire = [_wire_bytes((type(plans[0][0])(reply_encoding, 0, n),), options) for n in shard_sizes]
        self.reply_out_s = [model.reply_out_s(reply_encoding, n, b) for n, b in zip(shard_sizes, reply_wire)]
        self.reply_in_s = [model.reply_in_s(reply_encoding, n, b) for n, b in zip(shard_sizes, reply_wire)]
        # A request's cost beyond its parts, by fp32 bytes (the copies are of those): the worker's once per
        # step, over the whole model, after its last reply; each shard's by its own part.
        before, self.after_replies_s, _ = model.request_s(4 * self.total)
        self.push_out_s += before
        self.push_in_s = [s + model.request_s(4 * n)[2] for s, n in zip(self.push_in_s, shard_sizes)]
        self.wake_s = model.profile.request_shard_wake_us / 1e6
        self.taken_at: dict[int, float] = {}  # rank: when its replies so far were decoded
        # rank: when its last pushing step's compute and device time ended (a real worker's comm_s starts there)
        self.exchange_began: dict[int, Due] = {}
        self.evaluate_s: Optional[float] = None  # one evaluation on the evaluator's host, once counted

    # ---- a worker ----------------------------------------------------------------
    def step_ready(self, rank: int, start: float, device_s: float,
                   delay: Optional[Callable[[float], float]] = None) -> Due:
        """A step beginning at `start` of device time `device_s`: when its pushes leave (computed on the
        cores or beside the device, copied to the host, encoded and framed on a core). `delay(c)`: a
        straggler's wait after a step whose compute took `c` seconds (as its cores gave it)."""
        end = self.model.step_end(rank, start, device_s)
        if delay is not None:
            end = Due(end.job, end.offset + delay(end.at - start), end.floor)
        self.exchange_began[rank] = end
        copy_s = 4 * self.total / self.time.host_bytes_per_s if self.time.host_bytes_per_s else 0.0
        return Due(self.model.run(Role.WORKER, rank, end.at + copy_s, self.push_out_s))

    def reply_taken(self, rank: int, shard: int, t: float) -> None:
        """A reply reached worker `rank` at `t`: it is received and decoded on a core."""
        end = self.model.run(Role.WORKER, rank, t, self.reply_in_s[shard]).end
        self.taken_at[rank] = max(end, self.taken_at.get(rank, 0.0))

    def params_in_hand(self, rank: int) -> Due:
        """Every reply taken: the worker loop's own Python on a core; when the step is recorded."""
        taken = self.taken_at.pop(rank)
        return Due(self.model.run(Role.WORKER, rank, taken, self.after_replies_s + self.model.loop_s))

    def params_on_device(self, t: float) -> float:
        return t + (4 * self.total / self.time.host_bytes_per_s if self.time.host_bytes_per_s else 0.0)

    # ---- a shard -----------------------------------------------------------------
    def service_end(self, shard: int, server: Fifo, t: float, extra_s: float, idle: bool) -> tuple[float, Due]:
        """A push starting service when its shard's thread is free (`idle`: it found the shard asleep,
        which wakes at the profile's cost): (its service time, its end)."""
        busy = self.push_in_s[shard] + extra_s + (self.wake_s if idle else 0.0)
        job = self.model.run(Role.SERVER, shard, max(t, server.free_at), busy)
        server.free_at = job.end
        return busy, Due(job)

    def reply_leaves(self, shard: int, server: Fifo, t: float) -> Due:
        """A reply encoded and framed by its shard's thread, on a core of its host: when it leaves."""
        job = self.model.run(Role.SERVER, shard, max(t, server.free_at), self.reply_out_s[shard])
        server.free_at = job.end
        return Due(job)

    # ---- the evaluator ---------------------------------------------------------------
    def evaluation(self, t: float, servers: list[Fifo], executor) -> float:
        """An evaluation at `t`: every shard's thread sends it its parameters, and its host receives
        them and scores the test set (its work counted once, costed at the profile). Returns its end;
        the evaluation scores the parameters of `t`, as a real evaluator's pull does."""
        if self.evaluate_s is None:
            from psgd.sim.op_count import work_of
            self.evaluate_s = work_of(lambda: executor.task.evaluate(executor.model)).host_s(self.model.profile)
        pulled = max(self.reply_leaves(s, server, t).at for s, server in enumerate(servers))
        return self.model.run(Role.EVALUATOR, 0, pulled, sum(self.reply_in_s) + self.evaluate_s).end

    def cpu_fields(self, role: Role, index: int) -> dict:
        """What a real role's last event says of its CPU (cpu_s), as charged here."""
        return {"cpu_s": round(self.model.charged.get((role, index), 0.0), 9)}

    # ---- messages ----------------------------------------------------------------
    def push_arrivals(self, rank: int, shards: list[int], sizes: list[int], out: Fifo, intos: list[Fifo],
                      t: float, together) -> list[float]:
        """A worker's pushes leaving at `t`: over the NICs (`together`: psgd.sim.time_model.stream_together)
        to shards on other hosts, through memory to those on its own."""
        remote = [i for i, s in enumerate(shards) if not self.model.same_host(rank, s)]
        arrive = [t + self.model.local_s(b) for b in sizes]
        if remote:
            got = together(out, self.model.worker_link(rank),
                           [(intos[i], self.model.shard_link(shards[i])) for i in remote], t, [sizes[i] for i in remote])
            for i, a in zip(remote, got):
                arrive[i] = a
        return arrive

    def message(self, rank: int, shard: int, out: Fifo, into: Fifo, t: float, nbytes: int, to_shard: bool) -> float:
        """One message between worker `rank` and `shard` (`to_shard`: a push, else a reply), leaving
        `out` into `into`: through memory on one host, else over the two hosts' NICs."""
        if self.model.same_host(rank, shard):
            return t + self.model.local_s(nbytes)
        links = (self.model.worker_link(rank), self.model.shard_link(shard))
        out_link, into_link = links if to_shard else links[::-1]
        return stream(out, out_link, into, into_link, t, nbytes)


def host_clock_for(executor, time: TimeModel, now) -> Optional[HostClock]:
    """The run's host clock, or None without sim.hosts (the time model as before hosts); `now()`: the
    simulated instant the engine is handling."""
    cfg = executor.cfg
    if not cfg.sim.hosts:
        return None
    from psgd.sim.op_count import training_step_work
    from psgd.tasks.loaders import train_loader
    work = None
    if cfg.sim.hosts[cfg.sim.worker_kind].accelerators > 0 or cfg.workers.device_ms is not None:
        batch = next(train_loader(executor.task.train_data(), 0, cfg.cluster.workers, cfg.task.batch_size,
                                  cfg.run.seed))
        from psgd.tasks import build_model
        model = build_model(cfg, executor.task)
        work = training_step_work(executor.task, model, batch)
    hosts = HostModel.for_run(cfg, executor.num_shards, work, 4 * sum(executor.layout.shard_sizes))
    hosts.now = now
    return HostClock(cfg, hosts, executor.plans, list(executor.layout.shard_sizes), executor.reply_encoding, time)
