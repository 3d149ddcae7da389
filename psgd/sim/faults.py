"""The virtual cluster's failure model: processes killed at planned times and
restarted by the real launcher's rules (`sim.faults`, the `supervision:` keys), and
workers killed at stated times and never restarted (`sim.faults.kills`). One kill
rule serves both: a stated kill is a storm's kill without the restart.

The storm follows the plan `psgd bench faults` sends to a real run
(psgd.core.fault_plan.kill_schedule): one every `kill_every_s` simulated seconds,
the target's processes in turn. No kill, planned or stated, is made while the
process is down or after a worker finished. What a kill does, as on the real
launcher and shards:

- Messages: one whose sender or receiver dies before it has arrived is lost (the
  dead process's socket buffers go with it); a request sent to a shard that is
  down is lost too. A worker sees a shard's connection drop and come back
  (psgd.wire.transport.link_watch): it resends what it was waiting for the moment the shard
  is back, and waits without using up its attempts while the shard is down; a
  restarted worker's registration with a shard that is down is made once the
  shard is back.
- A killed worker loses the step it was computing (under local updates, its round
  so far: the inner steps it has not pushed) and its pushes still on the wire;
  those already at a shard are served (and their replies lost). After a storm's
  kill the launcher restarts it after the backoff (psgd.core.restarts: backoff_s
  doubling, reset after backoff_reset_s, within max_restarts; none due after
  train.max_time_s) plus `restart_s`; the new process joins every shard (the
  shard's register: the clock it continues from, the last seq it has), takes the
  parameters from the welcome and trains on, its data loader from the top. The
  shards drop the dead incarnation from the quorum once it has been silent for
  `cluster.timeout_s` (from its death, or from a later push of its that a shard
  served from its queue) unless it is back first (the live workers' heartbeats
  keep them in).
- A killed shard loses the pushes in its queue or in service, its parked pulls
  and every request sent to it while it is down. With a backup up
  (cluster.replicas, servers/standby.py) the backup serves it `promote_s` after the
  kill and the killed process comes back (backoff + restart_s) as the new backup;
  with none, the shard comes back (backoff + restart_s). Either way it holds what
  its checkpoint and push log restore (psgd.sim.fault_steps: every update it
  applied) and knows no connection: a worker's next request is answered
  `not_registered`, and the worker registers again and repeats the request to
  every shard with the same seq (shards that applied it recognise the resend). A
  worker also resends a lost request after `cluster.request_timeout_s`; after
  `max_retries` resends to a shard that is up it fails (RequestFailed) and is
  restarted like a killed worker, as when a shard refuses its push.
Every time and choice is a function of the config and seed: the same run, bit
for bit. Left out: the evaluator's own restarts (it reads the shards' state at
its instants), restarts under local updates and with batched gradients (a storm
is refused there; stated kills run), and any cost of the error replies and
registrations beyond their transfer times.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from psgd.config import Config, ConfigError, Role
from psgd.config.sim_faults import FaultTarget
from psgd.core.fault_plan import kill_schedule
from psgd.core.restarts import RestartBudget, after_training
from psgd.runtime.event_names import Event

__all__ = ["FailureModel", "PlannedKill", "check_faults"]

HEADER_BYTES = 64  # an error reply or a register request: a header, no payload


class PlannedKill(NamedTuple):
    """One kill the failure model will make: the storm's (restarted) or a stated one (not)."""
    role: Role
    index: int
    restarted: bool


def check_faults(cfg: Config) -> None:
    """Refuse (ConfigError naming the key) what the failure model cannot run."""
    faults = cfg.sim.faults
    if faults.kills and not cfg.consistency.mode.on_servers:
        raise ConfigError("sim.faults.kills", "not modelled for all-reduce (a dead rank stops its whole process "
                          "group); use bsp, ssp or asp")
    if not faults.storm:
        return  # stated kills restart nothing: any server-side mode, local updates and sim.batched run them
    if not cfg.consistency.mode.on_servers:
        raise ConfigError("sim.faults.kill_every_s", "all-reduce ranks cannot rejoin their process group, so a "
                          "killed one is not restarted; use bsp, ssp or asp")
    if cfg.local.enabled:
        raise ConfigError("sim.faults.kill_every_s", "not modelled under local updates (a restarted worker's inner "
                          "optimizer and its round in progress); leave local.steps unset")
    if cfg.sim.batched is True:  # auto runs one by one under a storm (psgd.sim.path_probe)
        raise ConfigError("sim.faults.kill_every_s", "not modelled with sim.batched: true (a killed worker's "
                          "step may sit in a batch); use sim.batched: false")
    count = cfg.cluster.workers if faults.target is FaultTarget.WORKERS else cfg.cluster.num_servers
    if not kill_schedule(faults.kill_every_s, cfg.train.max_time_s, count, cfg.supervision.backoff_s):
        raise ConfigError("sim.faults.kill_every_s", f"{faults.kill_every_s:g}: no kill fits in "
                          f"train.max_time_s={cfg.train.max_time_s:g} (none within 5 s of the end)")


class FailureModel:
    """Kills, restarts, lost messages and resends, driven by the engine's clock."""

    def __init__(self, engine: object, kinds: type):
        self.e, self.ex, self.K = engine, engine.ex, kinds
        cfg = self.cfg = engine.ex.cfg
        self.faults = cfg.sim.faults
        # Every kill as (t, what): the storm's, then the stated ones.
        self.plan: list[tuple[float, PlannedKill]] = []
        if self.faults.storm:
            role = self.faults.target.role
            count = cfg.cluster.workers if role == Role.WORKER else cfg.cluster.num_servers
            self.plan += [(t, PlannedKill(role, index, True)) for t, index in
                          kill_schedule(self.faults.kill_every_s, cfg.train.max_time_s, count, cfg.supervision.backoff_s)]
        self.plan += [(k.at_s, PlannedKill(Role.WORKER, k.rank, False)) for k in self.faults.kills]
        self.budget = RestartBudget(cfg.supervision)
        self.ex.recycling = False  # a lost push is resent with its gradient
        w, n = cfg.cluster.workers, cfg.cluster.num_servers
        self.worker_gen, self.worker_up = [0] * w, [True] * w
        self.shard_gen, self.shard_up = [0] * n, [True] * n
        self.backups = [cfg.cluster.replicas] * n  # each shard's backups that follow it now
        self.connected = [set(range(w)) for _ in range(n)]  # ranks each shard incarnation has a connection from
        self.held: list[list] = [[] for _ in range(n)]  # (rank, gen) registering with a shard that is down
        self.snapshots: dict[int, dict] = {}
        self.joining: set[int] = set()   # restarted workers waiting for their welcomes
        self.request = [0] * w           # each worker's request in progress (a repeat is a new one)
        self.outstanding: list[dict] = [{} for _ in range(w)]  # its pushes, by shard
        self.waiting = [False] * w       # a worker's request is sent and not yet answered by every shard
        self.kills: list[tuple[float, Role, int]] = []  # the kills made (t, role, index)
        # Only a shard's death loses a request: then the workers resend after request_timeout_s.
        shard_storm = self.faults.storm and self.faults.target.role == Role.SERVER
        self.resend_after_s = cfg.cluster.request_timeout_s if shard_storm else None

    def handlers(self) -> dict:
        K = self.K
        return {K.KILL: self._kill, K.BACK: self._back, K.EXPIRE: self._expire, K.RESEND: self._resend,
                K.REJOIN: self._rejoin, K.REPEAT: self._repeat}

    def start(self) -> None:
        for t, kill in self.plan:
            self.e.q.put(t, self.K.KILL, kill)

    # ---- the engine's questions --------------------------------------------
    def alive(self, rank: int) -> bool:
        return self.worker_up[rank]

    def stamp(self, rank: int, pushes: list) -> None:
        """A step's pushes, made by the worker's current incarnation."""
        for p in pushes:
            p.gen = self.worker_gen[rank]

    def current(self, pushes: list) -> bool:
        """The step ended in the process that began it (else it died with it)."""
        return pushes[0].gen == self.worker_gen[pushes[0].rank] and self.worker_up[pushes[0].rank]

    def sending(self, pushes: list, t: float) -> list:
        """A new request: the pushes that leave now (those to a shard that is down wait)."""
        rank = pushes[0].rank
        self.request[rank] += 1
        self.waiting[rank] = True
        self.outstanding[rank] = {p.shard: p for p in pushes}
        return self._leave(pushes, t)

    def _leave(self, pushes: list, t: float) -> list:
        now = []
        for p in pushes:
            p.request = self.request[p.rank]
            if self.shard_up[p.shard]:
                p.shard_gen = self.shard_gen[p.shard]
                now.append(p)
            # else lost, as on a real run: nobody reads a dead shard's socket; the resend below repeats it
            if self.resend_after_s is not None:
                self.e.q.put(t + self.resend_after_s, self.K.RESEND, (p.rank, p.gen, p.request, p.shard, 1))
        return now

    def arrives(self, p: object, t: float) -> bool:
        """Whether push `p` reaches its shard now and is taken in (else it is lost, or
        answered `not_registered`: the worker joins again and repeats)."""
        if p.gen != self.worker_gen[p.rank] or not self.worker_up[p.rank]:
            return False  # its sender died with it on the wire
        if not self.shard_up[p.shard] or p.shard_gen != self.shard_gen[p.shard]:
            return False  # its shard died before it arrived
        if p.rank not in self.connected[p.shard] or p.rank not in self.ex.shards[p.shard].registered:
            self._not_registered(p, t)
            return False
        return True

    def in_service(self, p: object) -> bool:
        """The shard that took `p` in is still the one serving (it was not killed since)."""
        return self.shard_up[p.shard] and p.shard_gen == self.shard_gen[p.shard]

    def replying(self, r: object, request: int) -> bool:
        """A shard sends reply `r` to the worker's request `request`; False: its worker is gone."""
        if not self.worker_up[r.rank]:
            r.read.done = True
            return False
        r.gen, r.shard_gen, r.request = self.worker_gen[r.rank], self.shard_gen[r.shard], request
        return True

    def answered(self, rank: int) -> None:
        """Every shard answered the worker's request: a repeat's late answers find it computing."""
        self.waiting[rank] = False

    def reply_arrives(self, r: object) -> bool:
        """Whether reply `r` reaches a worker that still waits for it."""
        lost = (r.gen != self.worker_gen[r.rank] or not self.worker_up[r.rank]
                or not (self.waiting[r.rank] or r.rank in self.joining)
                or not self.shard_up[r.shard] or r.shard_gen != self.shard_gen[r.shard]
                or r.request != self.request[r.rank] or r.shard in self.ex.workers[r.rank].replies)
        if lost:
            r.read.done = True
        return not lost

    def finish_join(self, rank: int) -> bool:
        """True when this reply completed a restarted worker's welcomes: it starts training."""
        if rank not in self.joining:
            return False
        self.joining.discard(rank)
        return True  # its budget continues from its clock (VirtualWorker.steps_taken)

    # ---- kills and restarts -------------------------------------------------
    def _kill(self, kill: PlannedKill, t: float) -> None:
        index = kill.index
        if kill.role == Role.WORKER:
            if self.worker_up[index] and index not in self.e.said_done:
                self.kills.append((t, Role.WORKER, index))
                self._worker_down(index, t, "killed (SIGKILL)", restart=kill.restarted)
        elif self.shard_up[index]:
            self.kills.append((t, Role.SERVER, index))
            self._shard_down(index, t)

    def _restart(self, role: Role, index: int, t: float, cause: str) -> bool:
        """Book a restart as the launcher does; False when none is made (after training)."""
        due = t + self.budget.delay_s(role, index, t)
        if after_training(role, due, self.cfg.train.max_time_s):
            return False
        pending = self.budget.schedule(role, index, t)
        if pending is None:
            raise ConfigError("supervision.max_restarts", f"{role} {index} died more often than "
                              f"max_restarts={self.cfg.supervision.max_restarts} allows (the real launcher "
                              "would fail the run): raise it")
        self.e.emit({"t": round(t, 6), "role": "launcher", "index": 0, "event": Event.RESTART, "process": role,
                     "process_index": index, "attempt": self.budget.used(role, index), "cause": cause})
        self.e.q.put(pending.due + self.faults.restart_s, self.K.BACK, (role, index))
        return True

    def _worker_down(self, rank: int, t: float, cause: str, restart: bool = True) -> None:
        self.worker_up[rank] = False
        self.worker_gen[rank] += 1
        self.e.flushing.discard(rank)
        self.e.open_push.pop(rank, None)
        self.e.pending.pop(rank, None)   # a step left for the batch dies uncomputed
        self.e.computed.pop(rank, None)
        self.outstanding[rank], self.waiting[rank] = {}, False
        self.joining.discard(rank)
        for s in range(self.ex.num_shards):  # it heartbeat until now: its silence starts here
            if self.shard_up[s]:
                self.ex.shards[s].seen(rank, t)
        if not (restart and self._restart(Role.WORKER, rank, t, f"worker {rank} {cause}")):
            self.e.active -= 1  # gone for good: nobody waits for its steps
        self.e.q.put(t + self.cfg.cluster.timeout_s, self.K.EXPIRE, None)

    def _shard_down(self, s: int, t: float) -> None:
        self.shard_up[s] = False
        self.snapshots[s] = self.ex.fault_steps.snapshot_shard(s)
        self.e.waiting[s] = []  # its queue dies with it
        self.e.serving[s] = False
        self.connected[s] = set()
        self._restart(Role.SERVER, s, t, f"server {s} killed (SIGKILL)")  # back as a backup if one took over
        if self.backups[s]:
            self.backups[s] -= 1
            self.e.q.put(t + self.faults.promote_s, self.K.BACK, (Role.SERVER, s))

    def _back(self, who: tuple, t: float) -> None:
        role, index = who
        if role == Role.WORKER:
            self.worker_up[index] = True
            self.ex.fault_steps.restart_worker(index)
            self.request[index] += 1
            self.joining.add(index)
            for s in range(self.ex.num_shards):
                if self.shard_up[s]:
                    self._join(index, s, t, welcome=True)
                else:
                    self.held[s].append((index, self.worker_gen[index]))
            return
        if self.shard_up[index]:  # a backup took the shard over first: this process follows it
            self.backups[index] += 1
            return
        if self.cfg.cluster.replicas:  # the primary's state, as its backup followed it or its checkpoint restores it
            self.e.emit({"t": round(t, 6), "role": Role.SERVER, "index": index, "event": Event.PROMOTED,
                         "version": self.snapshots[index]["version"], "followed": 0})
        self.ex.fault_steps.restart_shard(index, self.snapshots.pop(index), t)
        self.e.hook_shard(index)
        self.shard_gen[index] += 1
        self.shard_up[index] = True
        self.e.q.put(t + self.cfg.cluster.timeout_s, self.K.EXPIRE, None)  # ranks restored but silent leave
        held, self.held[index] = self.held[index], []
        for rank, gen in held:  # the restarted workers that registered while it was down, in order
            if gen == self.worker_gen[rank] and self.worker_up[rank]:
                self._join(rank, index, t, welcome=True)
        self._reconnected(index, t)

    def _reconnected(self, s: int, t: float) -> None:
        """Shard s is back on its address: each worker still waiting for its answer resends
        at once (its connection came back), and is answered `not_registered`, joins, repeats."""
        for rank, push in enumerate(o.get(s) for o in self.outstanding):
            if push and self.worker_up[rank] and self.waiting[rank] and s not in self.ex.workers[rank].replies:
                push.shard_gen = self.shard_gen[s]
                self.e.resend(push, t)

    def _join(self, rank: int, s: int, t: float, welcome: bool) -> None:
        """Worker `rank` registers with shard s at `t` (the shard's own register)."""
        self.ex.now = t
        hello, released = self.ex.fault_steps.join(rank, s, t)
        self.connected[s].add(rank)
        self.e.emit({"t": round(t, 6), "role": Role.SERVER, "index": s, "event": Event.REGISTER, "rank": rank,
                     "clock": hello.clock})
        self.e.send_released(released, t)
        if welcome:
            self.e.send_reply(hello, t, self.request[rank])
        else:
            hello.read.done = True  # a re-join mid-request: the repeat's replies bring the parameters

    def _expire(self, _, t: float) -> None:
        """The shards drop workers silent for cluster.timeout_s; the live ones heartbeat."""
        for s in range(self.ex.num_shards):
            if not self.shard_up[s]:
                continue
            state = self.ex.shards[s]
            for rank in self.connected[s]:
                if self.worker_up[rank]:
                    state.seen(rank, t)
            departed = self.ex.services[s].expire(t)
            self.e.send_released(self.ex.fault_steps.replies_of(s, departed), t)
        self.e.schedule_deadlines()  # a quorum that shrank may open its grace window
        # A dead worker whose last push a shard served after its death is silent for timeout_s
        # only later: the shards look again the first instant its silence exceeds it.
        last = [self.ex.shards[s].last_seen[r] for s in range(self.ex.num_shards) if self.shard_up[s]
                for r in self.ex.shards[s].last_seen if not self.worker_up[r]]
        if last:
            self.e.q.put(self._silent_past(min(last)), self.K.EXPIRE, None)

    def _silent_past(self, seen: float) -> float:
        """The first instant at which a shard's rule (silent > timeout_s) drops one last seen at `seen`."""
        at = seen + self.cfg.cluster.timeout_s
        while at - seen <= self.cfg.cluster.timeout_s:
            at = math.nextafter(at, math.inf)
        return at

    # ---- lost requests --------------------------------------------------------
    def _resend(self, what: tuple, t: float) -> None:
        rank, gen, request, s, attempt = what
        if gen != self.worker_gen[rank] or request != self.request[rank] or s in self.ex.workers[rank].replies:
            return
        if not self.shard_up[s]:  # the connection is down: no attempt used up; the shard's return resends
            self.e.q.put(t + self.resend_after_s, self.K.RESEND, (rank, gen, request, s, attempt))
            return
        if attempt > self.cfg.cluster.max_retries:  # RequestFailed: the worker exits, the launcher restarts it
            self._worker_down(rank, t, f"failed: shard {s} did not answer after {attempt - 1} resends")
            return
        push = self.outstanding[rank][s]
        self.e.q.put(t + self.resend_after_s, self.K.RESEND, (rank, gen, request, s, attempt + 1))
        if self.shard_up[s]:  # else this resend is lost too, and the next one falls due
            push.shard_gen = self.shard_gen[s]
            self.e.resend(push, t)

    def refused(self, p: object, t: float, exc: Exception) -> None:
        """The shard answered push `p` with an error (a shard that restarted without checkpoints
        is behind the worker's read version): the worker's call raises and its process exits;
        the launcher restarts it. A dead incarnation's push: nobody reads the error."""
        if p.gen == self.worker_gen[p.rank] and self.worker_up[p.rank] and p.request == self.request[p.rank]:
            self._worker_down(p.rank, t, f"failed: shard {p.shard} refused its push ({exc})")

    def _not_registered(self, p: object, t: float) -> None:
        """Shard p.shard does not know p's worker: its error reply goes back."""
        if p.request != self.request[p.rank]:
            return
        arrive = t + self.e.time.shard_link.latency_s + self.e.time.worker_link.latency_s
        self.e.q.put(arrive, self.K.REJOIN, (p.rank, p.gen, p.request, p.shard))

    def _rejoin(self, what: tuple, t: float) -> None:
        """The worker registers with the shard that forgot it, then repeats its request."""
        rank, gen, request, s = what
        if gen != self.worker_gen[rank] or request != self.request[rank] or not self.worker_up[rank]:
            return
        if not self.shard_up[s]:  # down again: lost; the request's resend repeats it
            return
        at = t + self.e.time.worker_link.latency_s + self.e.time.shard_link.latency_s
        self._join(rank, s, at, welcome=False)
        welcome = self.e.net.downlink_arrival(s, rank, at, 4 * self.ex.layout.shard_sizes[s])
        self.e.q.put(welcome, self.K.REPEAT, (rank, gen, request))

    def _repeat(self, what: tuple, t: float) -> None:
        rank, gen, request = what
        if gen != self.worker_gen[rank] or request != self.request[rank] or not self.worker_up[rank]:
            return
        self.ex.workers[rank].replies = {}
        self.request[rank] += 1
        pushes = list(self.outstanding[rank].values())
        self.e.send_pushes(self._leave(pushes, t), t)

