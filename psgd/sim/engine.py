"""The discrete-event clock: decides who runs next and when, in simulated seconds.

Events sit in a heap keyed by (time, tie, sequence number). Sends that leave
at the same instant (workers in lock-step) carry a seeded draw as their tie
(psgd.sim.jitter.SendOrder), as do pulls a shard releases together, and a busy
shard takes the next of the pushes waiting for it by a seeded draw (a ZMQ
ROUTER fair-queues its peers: arrival order is not service order); every
other tie goes in the order it was scheduled. So the same config and seed give
the same order, and lock-step does not queue the same ranks last at every clock.
What each event does is the executor's (psgd.sim.executor); this module only
adds time (psgd.sim.time_model) and the evaluator's instants.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Optional

from psgd.config import ConfigError, Role
from psgd.core.local_methods import Schedule
from psgd.runtime.event_names import Event
from psgd.sim.event_queue import EventQueue, Kind, SimResult, event
from psgd.sim.executor import Executor
from psgd.sim.faults import FailureModel
from psgd.sim.fragment_turns import FragmentTurns, RoundTurns
from psgd.sim.host_clock import host_clock_for
from psgd.sim.jitter import SendOrder
from psgd.sim.limits import evaluations_exceeded
from psgd.sim.messages import Push, Reply
from psgd.sim.network import Network
from psgd.sim.step_times import StepTimes
from psgd.sim.time_model import Fifo, TimeModel
from psgd.wire.protocol import ProtocolError

__all__ = ["Engine"]

# Each local method's schedule as the engine turns it (the executor's STEPS has the same keys).
TURNS = {Schedule.ROUNDS: RoundTurns, Schedule.FRAGMENTS: FragmentTurns}


class Engine:
    """Runs `executor` under `time` until every worker has done its steps (or
    `max_time_s` of simulated time). `emit` receives every event record (step,
    eval, server_stats, setting_change, done) as it happens; `stop` may end the run at an eval.
    `step_times`: each step's compute (default: the time model's, with its jitter and spread)."""

    def __init__(self, executor: Executor, time: TimeModel, *, steps_per_worker: int, max_time_s: float,
                 eval_every_s: Optional[float], emit: Callable[[dict], None] = lambda e: None,
                 stop: Optional[Callable[[dict], bool]] = None, step_times: Optional[StepTimes] = None):
        self.ex, self.time = executor, time.for_plans(executor.plans, executor.cfg.sim)  # its shards' own codecs
        self.steps_per_worker, self.max_time_s = steps_per_worker, max_time_s
        self.eval_every_s = eval_every_s
        self.stop = stop or (lambda record: False)
        self.emit = emit
        n, w = executor.num_shards, len(executor.workers)
        self.servers = [Fifo() for _ in range(n)]  # each shard's thread
        # Hosts (sim.hosts): CPU jobs on their cores, one NIC per host; None: every role its own link.
        self.hosts = host_clock_for(executor, self.time, lambda: self.now)
        self.net = Network(n, w, self.time, self.hosts)
        self.serving = [False] * n  # whether each shard is serving a push now
        # Pushes waiting for their busy shard: (seeded priority, rank, push). The real shard's
        # ZMQ ROUTER reads its peers' queued messages in turn, not by arrival time.
        self.waiting: list[list] = [[] for _ in range(n)]
        self.arrivals = [0] * n      # pushes each shard received
        self.wakes = [0] * n         # of them, those that found it idle
        self.served_s = [0.0] * n    # its simulated service time in all
        self.step_times = step_times or StepTimes(time, executor.cfg.run.seed)
        self.send_order = SendOrder(executor.cfg.run.seed)
        self.pick_order = SendOrder(executor.cfg.run.seed, stream=1)
        self.now = 0.0  # the time of the event being handled (the shards' setting_change events carry it)
        self.evaluations = 0
        for s in range(n):
            self.hook_shard(s)
        self.computed_s = [time.compute_s] * len(executor.workers)  # each worker's last step's compute
        self.started_at = [0.0] * len(executor.workers)
        self.round_at = [0.0] * len(executor.workers)  # when each worker's parameters last arrived
        self.flushing: set[int] = set()  # workers whose last, shorter local round is in flight
        self.sent_at = [0.0] * len(executor.workers)
        self.result = SimResult()
        self.q = EventQueue()
        self.active = len(executor.workers)
        self.said_done: set[int] = set()  # ranks whose done event (with the bytes they pushed) was emitted
        # rank: wire bytes of its push not yet complete (computed, maybe sent, its replies not all in): a
        # worker stopped by the limit has not completed it, and a real one's done event does not count it.
        self.open_push: dict[int, int] = {}
        # Batched gradients (executor.batcher): a plain step's gradient is computed when
        # it is first needed, at the first STEP_DONE, together with every other step
        # started by then: their parameters are fixed from their start (the shard
        # copies on write what a worker has not stepped on), so the batch holds
        # exactly the workers whose step started and whose reply was applied.
        self.deadlines: set[tuple[int, float]] = set()  # (shard, when) of the grace windows scheduled
        self.pending: dict[int, float] = {}          # rank: step_s of a started, uncomputed step
        self.computed: dict[int, list[Push]] = {}    # rank: pushes computed ahead of its STEP_DONE
        # Kills and restarts (sim.faults); None: no process dies, and no event below checks for it.
        self.faults = FailureModel(self, Kind) if executor.cfg.sim.faults.enabled else None
        self.turns = TURNS[executor.schedule](self)  # the local method's schedule (plain training: ROUNDS)

    def hook_shard(self, s: int) -> None:
        """Shard s's adaptive-bound decisions reach the events, as a real shard reports them."""
        self.ex.shards[s].report_to(lambda name, s=s, **fields: self.emit(event(self.now, Role.SERVER, s, name,
                                                                                **fields)))

    # ---- scheduling -------------------------------------------------------
    def _start_step(self, rank: int, t: float) -> None:
        w = self.ex.workers[rank]
        self.ex.now = t
        if w.steps_taken >= self.steps_per_worker and self.turns.finishing(rank, t):
            return
        if w.steps_taken >= self.steps_per_worker:  # as a real worker counts: a restart's and dropped clocks included
            last = self.ex.flush(rank, step_s=t - self.round_at[rank])  # a local round cut short still counts
            if last is not None:
                self.open_push[rank] = sum(p.wire_bytes for p in last)
                self.flushing.add(rank)
                if self.faults is not None:
                    self.faults.stamp(rank, last)
                self.send(last, t)
                return
            released = self.ex.leave(rank, t)  # as opt.close(): nobody waits for it any more
            self.active -= 1
            self._done(rank, t)
            self._send_together(released, t)
            self._schedule_deadlines()
            return
        step = w.steps_taken
        compute_s = self.step_times.compute_s(rank, step)
        if not math.isfinite(compute_s):
            raise ConfigError("sim", f"worker {rank}'s step {step} would take {compute_s} s: check compute_ms, "
                              "speedup, compute_jitter and worker_spread")
        self.computed_s[rank] = compute_s
        # With hosts a straggler waits a multiple of its step's compute as it came out on the cores, as a real
        # one waits a multiple of the compute it measured (workers/worker.py); the host clock draws it.
        hosted = self.hosts is not None and w.local is None and w.straggler.active
        delay = (lambda c: w.straggler.extra_s(c, t)) if hosted else None
        busy = compute_s + (w.straggler.extra_s(compute_s, t) if w.straggler.active and not hosted else 0.0)
        self.ex.now = t + busy  # a local round's pace is read when its last step ends
        self.started_at[rank] = t
        ready = (t + busy + self.time.before_push_s(self.ex.layout.shard_sizes,  # to the host and encoded
                                                    range(self.ex.num_shards)) if self.hosts is None else None)
        if self.ex.batcher is not None and w.local is None:  # computed with the others at the first step end
            self.pending[rank] = t + busy - self.round_at[rank]
            due = None if self.hosts is None else self.hosts.step_ready(rank, t, busy, delay)
            self.q.put(ready if due is None else due.at, Kind.STEP_DONE, rank, tie=self.send_order.priority(rank, step),
                       due=due)
            return
        pushes = self.ex.compute(rank, step_s=t + busy - self.round_at[rank])
        if pushes is not None:
            self.open_push[rank] = sum(p.wire_bytes for p in pushes)
            if self.faults is not None:
                self.faults.stamp(rank, pushes)
        if pushes is None:  # an inner step of a local round (with hosts: on its cores, or beside its device)
            due = None if self.hosts is None else self.hosts.model.step_end(rank, t, busy)
            self.q.put(t + busy if due is None else due.at, Kind.LOCAL_DONE, rank, due=due)
        else:  # the gradient to the host and encoded, then it leaves
            due = None if self.hosts is None else self.hosts.step_ready(rank, t, busy, delay)
            self.q.put(ready if due is None else due.at, Kind.STEP_DONE, pushes,
                       tie=self.send_order.priority(rank, step), due=due)

    start_step = _start_step

    def step_done_at(self, t: float, pushes: list[Push], tie: float) -> None:
        """`pushes` leave at `t`, ordered among sends at that instant by `tie` (a streaming fragment's)."""
        self.q.put(t, Kind.STEP_DONE, pushes, tie=tie)

    def _local_done(self, rank: int, t: float) -> None:
        if self.faults is not None and not self.faults.alive(rank):
            return  # killed mid-round: its inner steps die with it (no restart under local updates)
        w = self.ex.workers[rank]
        self.result.steps += 1
        self.emit(event(t, Role.WORKER, rank, Event.STEP, rank=rank, clock=w.round_clock, loss=w.last_loss,
                        compute_s=round(self.computed_s[rank], 9), comm_s=0.0,
                        step_s=round(t - self.started_at[rank], 9), gap=0, wait_s=0.0))
        self.turns.after_inner_step(rank, t)

    def _step_done(self, done, t: float) -> None:
        """A step's compute ended: its pushes go out (computed now, with every
        other started step, when it was left for the batch)."""
        if isinstance(done, int):
            if self.faults is not None and not self.faults.alive(done):
                return  # killed before its step was computed (no restart with sim.batched)
            self._compute_pending()
            done = self.computed.pop(done)
        if self.faults is not None and not self.faults.current(done):
            return  # the worker died computing it
        self.send(done, t)

    def _compute_pending(self) -> None:
        if self.pending:
            computed = self.ex.compute_together(self.pending)
            if self.faults is not None:
                for rank, pushes in computed.items():
                    self.faults.stamp(rank, pushes)
            self.computed.update(computed)
            self.open_push.update({rank: sum(p.wire_bytes for p in pushes) for rank, pushes in computed.items()})
            self.pending = {}

    def send(self, pushes: list[Push], t: float) -> None:
        rank = pushes[0].rank
        self.sent_at[rank] = t
        if self.faults is not None:
            pushes = self.faults.sending(pushes, t)
        self.send_pushes(pushes, t)

    def send_pushes(self, pushes: list[Push], t: float) -> None:
        """One worker's pushes leave together; each arrives at its shard's queue."""
        if not pushes:
            return
        for p, arrive in zip(pushes, self.net.push_arrivals(pushes, t)):
            self.q.put(arrive, Kind.ARRIVE, p)

    def resend(self, p: Push, t: float) -> None:
        """A push sent again (or released from the worker's queue when its shard is back)."""
        self.q.put(self.net.push_arrival(p, t), Kind.ARRIVE, p)

    def _arrive(self, p: Push, t: float) -> None:
        if self.faults is not None and not self.faults.arrives(p, t):
            return
        self.arrivals[p.shard] += 1
        if self.serving[p.shard]:  # busy: it waits with the others (a ZMQ ROUTER fair-queues its peers)
            heapq.heappush(self.waiting[p.shard], (self.pick_order.priority(p.rank, p.seq), p.rank, p))
            return
        self._serve(p, t, self.time.finds_idle(self.servers[p.shard].free_at, t))

    def _serve(self, p: Push, t: float, idle: bool) -> None:
        due = None
        if self.hosts is not None:  # on a core of its host, the wake-up included
            service_s, due = self.hosts.service_end(p.shard, self.servers[p.shard], t,
                                                    self.time.wake_s if idle else 0.0, idle)
            end = due.at
        else:
            service_s = self.time.service_s(self.ex.layout.shard_sizes[p.shard], idle, p.shard)
            end = self.servers[p.shard].occupy(t, service_s)
        self.wakes[p.shard] += idle
        self.served_s[p.shard] += service_s
        self.serving[p.shard] = True
        self.q.put(end, Kind.SERVED, p, due=due)

    def _served(self, p: Push, t: float) -> None:
        if self.faults is not None and not self.faults.in_service(p):
            return  # its shard was killed while serving it: not applied
        self.serving[p.shard] = False
        if self.waiting[p.shard]:  # the next request, back to back: which of those waiting is a seeded draw
            self._serve(heapq.heappop(self.waiting[p.shard])[2], t, idle=False)
        self.ex.now = t  # the shard's clock: a quorum's grace window opens at the push that completes it
        if self.faults is not None:  # a shard restarted without checkpoints may refuse a resent push
            try:
                released = self.ex.serve_push(p)
            except ProtocolError as exc:
                self.faults.refused(p, t, exc)
                return
        else:
            released = self.ex.serve_push(p)
        self._send_together(released, t)  # to parked pulls the push released
        self.ex.recycle(p)
        # The pull the push carries (push_pull); None: parked. Under faults its clock is the push's
        # own (its worker may have died and rejoined since), else the worker's, which is the same.
        reply = self.ex.try_answer(p.shard, p.rank, p.clock + 1 if self.faults is not None else None)
        if reply is not None:
            self._send_reply(reply, t, p.request)
        self._schedule_deadlines()

    def _schedule_deadlines(self) -> None:
        """Each grace window a shard opened closes at its deadline, on the simulated clock."""
        for s, when in self.ex.deadlines():
            if (s, when) not in self.deadlines:
                self.deadlines.add((s, when))
                self.q.put(when, Kind.DEADLINE, (s, when))

    schedule_deadlines = _schedule_deadlines

    def _deadline(self, due: tuple[int, float], t: float) -> None:
        self.deadlines.discard(due)
        self._send_together(self.ex.tick(due[0], t), t)
        self._schedule_deadlines()

    def _send_reply(self, reply: Reply, t: float, request: Optional[int] = None) -> None:
        """`request`: the worker's request it answers (None: the one in progress)."""
        if self.faults is not None and not self.faults.replying(
                reply, self.faults.request[reply.rank] if request is None else request):
            return
        # With hosts, encoded by the shard's thread on a core of its host before it leaves.
        due = None if self.hosts is None else self.hosts.reply_leaves(reply.shard, self.servers[reply.shard], t)
        arrival = self.net.reply_arrival(reply, t if due is None else due.at)
        self.q.put(arrival, Kind.REPLY, reply, due=None if due is None else due.then(arrival))

    send_reply = _send_reply

    def _send_together(self, replies: list[Reply], t: float) -> None:
        """Replies a shard sends at one instant (pulls released together) share its link
        at once: which goes first is a seeded draw, not the parking order."""
        by_rank = {(r.shard, r.rank): r for r in replies}
        for shard in dict.fromkeys(r.shard for r in replies):
            ranks = [r.rank for r in replies if r.shard == shard]
            for rank in self.send_order.ranks(ranks, self.ex.workers[ranks[0]].pull_clock(shard)):
                self._send_reply(by_rank[shard, rank], t)

    send_released = _send_together

    def _reply(self, r: Reply, t: float) -> None:
        if self.faults is not None and not self.faults.reply_arrives(r):
            return
        if self.hosts is not None:
            self.hosts.reply_taken(r.rank, r.shard, t)
        if not self.ex.receive(r):
            return
        if self.faults is not None:
            self.faults.answered(r.rank)
        if self.hosts is not None:  # the worker decoded every reply and its loop recorded the step
            due = self.hosts.params_in_hand(r.rank)
            if due.moves:  # its end is known once it comes (the cores are shared)
                self.q.put(due.at, Kind.IN_HAND, r, due=due)
                return
            t = due.at
        self._in_hand(r, t)

    def _in_hand(self, r: Reply, t: float) -> None:
        """Worker `r.rank` holds its parameters at `t`: its step is recorded and the next one starts."""
        self.open_push.pop(r.rank, None)
        if self.turns.replied(r.rank, t):
            return
        w = self.ex.workers[r.rank]
        self.round_at[r.rank] = t
        fetched = (t + self.time.after_pull_s(self.ex.layout.total) if self.hosts is None  # onto the device
                   else self.hosts.params_on_device(t))
        if r.rank in self.flushing:  # the reply to a flushed round: no training step of its own
            self.flushing.discard(r.rank)
            self._start_step(r.rank, fetched)
            return
        if self.faults is not None and self.faults.finish_join(r.rank):  # a restarted worker's welcomes
            self._start_step(r.rank, fetched)
            return
        self.result.steps += 1  # comm_s from where a real worker's starts (with hosts: before it encodes)
        began = self.sent_at[r.rank] if self.hosts is None else self.hosts.exchange_began[r.rank].at
        self.emit(event(t, Role.WORKER, r.rank, Event.STEP, rank=r.rank, clock=w.clock, loss=w.last_loss,
                         compute_s=round(self.computed_s[r.rank], 9), comm_s=round(t - began, 9),
                         step_s=round(t - self.started_at[r.rank], 9), gap=w.clock - min(x.min_clock for x in
                                                                                            w.replies.values()),
                         wait_s=round(max(x.held_s for x in w.replies.values()), 9)))  # as a real worker's
        self._start_step(r.rank, fetched)

    def _evaluate(self, t: float, final: bool = False) -> bool:
        self.evaluations += 1
        too_many = evaluations_exceeded(self.evaluations, self.eval_every_s)
        if too_many is not None:
            raise too_many
        if self.hosts is not None:  # its pulls and its scoring take the shards' threads and its host's cores
            self.hosts.evaluation(t, self.servers, self.ex)
        for shard, service in zip(self.ex.shards, self.ex.services):
            cpu = self.hosts.cpu_fields(Role.SERVER, shard.shard) if self.hosts is not None else {}
            self.emit(event(t, Role.SERVER, shard.shard, Event.SERVER_STATS, busy_s=round(self.served_s[shard.shard], 9),
                            waits=service.waits.totals(), **cpu, **shard.stats()))
        record = event(t, Role.EVALUATOR, 0, Event.EVAL, **({"final": True} if final else {}), **self.ex.evaluate())
        self.result.evals.append(record)
        self.emit(record)
        return self.stop(record)

    def _done(self, rank: int, t: float) -> None:
        """Counts what a real worker's done event counts: the push it was stopped in
        (computing it, or waiting for its replies) did not complete."""
        w = self.ex.workers[rank]
        self.said_done.add(rank)
        open_bytes = self.open_push.pop(rank, None)
        cut = int(open_bytes is not None)
        seqs = w.seqs
        self.emit(event(t, Role.WORKER, rank, Event.DONE, rank=rank, clock=w.clock - cut, steps=w.steps - cut,
                         pushes=w.pushes - cut, seqs=seqs - cut, resends=0,
                         bytes_sent=w.encoder.wire_bytes - (open_bytes or 0), peak_push_bytes=w.peak_push_bytes,
                         fp32_bytes=w.encoder.fp32_bytes,
                         compression_ratio=round(w.encoder.compression_ratio, 6),
                         pull_bytes=w.pulled.wire_bytes, pull_fp32_bytes=w.pulled.fp32_bytes,
                         **(self.hosts.cpu_fields(Role.WORKER, rank) if self.hosts is not None else {})))

    # ---- the loop ---------------------------------------------------------
    def run(self) -> SimResult:
        for w in self.ex.workers:
            self._start_step(w.rank, 0.0)
        if self.eval_every_s:
            self.q.put(0.0, Kind.EVALUATE, None)
        handlers = {Kind.STEP_DONE: self._step_done, Kind.ARRIVE: self._arrive, Kind.SERVED: self._served,
                    Kind.REPLY: self._reply, Kind.LOCAL_DONE: self._local_done, Kind.DEADLINE: self._deadline,
                    Kind.IN_HAND: self._in_hand}
        if self.faults is not None:
            self.faults.start()
            handlers.update(self.faults.handlers())
        t, ended = 0.0, False
        while self.q and self.active > 0:
            t, kind, data = self.q.pop()
            self.now = t
            if t > self.max_time_s:
                t, ended = self.max_time_s, True
                break
            if kind is Kind.EVALUATE:
                if self._evaluate(t):
                    ended = True
                    break
                self.q.put(t + self.eval_every_s, Kind.EVALUATE, None)
                continue
            handlers[kind](data, t)
        if self.active > 0 and not ended:
            blocked = [w.rank for w in self.ex.workers if w.steps_taken < self.steps_per_worker
                       and (self.faults is None or self.faults.alive(w.rank))]
            raise RuntimeError(f"the simulated run stopped with workers {blocked[:8]} waiting on a shard "
                               "that will never answer")
        self._compute_pending()  # steps under way count, as the one-by-one path computed them at their start
        for w in self.ex.workers:  # stopped by the clock or the target: a real worker says done as it exits
            if w.rank not in self.said_done and (self.faults is None or self.faults.alive(w.rank)):
                self._done(w.rank, t)
        self.result.end_s = self.now = t
        self._evaluate(t, final=True)
        return self.result
