"""The discrete-event clock: decides who runs next and when, in simulated seconds.

Events sit in a heap keyed by (time, sequence number): ties are broken by the
order they were scheduled, so the same config and seed give the same order.
What each event does is the executor's (psgd.sim.executor); this module only
adds time (psgd.sim.time_model) and the evaluator's instants.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, Optional

from psgd.config import Role
from psgd.runtime.event_names import Event
from psgd.sim.executor import Executor, Push, Reply
from psgd.sim.jitter import ComputeJitter
from psgd.sim.time_model import Fifo, TimeModel

__all__ = ["Engine", "EventQueue", "Kind", "SimResult"]


class Kind(IntEnum):
    STEP_DONE = 0     # a worker finished computing (and any straggler delay): send its pushes
    ARRIVE = 1        # a push reached its shard's queue
    SERVED = 2        # the shard finished serving a push
    REPLY = 3         # a pull reply reached its worker
    EVALUATE = 4      # the evaluator scores the shards' parameters
    LOCAL_DONE = 5    # local updates: a worker finished an inner step that sends nothing


class EventQueue:
    def __init__(self):
        self._heap: list = []
        self._n = 0

    def put(self, t: float, kind: Kind, data: Any) -> None:
        heapq.heappush(self._heap, (t, self._n, kind, data))
        self._n += 1

    def pop(self) -> tuple[float, Kind, Any]:
        t, _, kind, data = heapq.heappop(self._heap)
        return t, kind, data

    def __len__(self) -> int:
        return len(self._heap)


@dataclass
class SimResult:
    evals: list[dict] = field(default_factory=list)   # the eval events, in simulated time
    end_s: float = 0.0                                 # simulated seconds the run took
    steps: int = 0                                     # worker steps completed


def event(t: float, role: Role, index: int, name: Event, **fields) -> dict:
    """One record in the shape psgd.runtime.events writes (times in simulated seconds)."""
    return {"t": round(t, 6), "role": role, "index": index, "event": name, **fields}


class Engine:
    """Runs `executor` under `time` until every worker has done its steps (or
    `max_time_s` of simulated time). `emit` receives every event record (step,
    eval, server_stats, done) as it happens; `stop` may end the run at an eval."""

    def __init__(self, executor: Executor, time: TimeModel, *, steps_per_worker: int, max_time_s: float,
                 eval_every_s: Optional[float], emit: Callable[[dict], None] = lambda e: None,
                 stop: Optional[Callable[[dict], bool]] = None):
        self.ex, self.time = executor, time
        self.steps_per_worker, self.max_time_s = steps_per_worker, max_time_s
        self.eval_every_s = eval_every_s
        self.stop = stop or (lambda record: False)
        self.emit = emit
        n = executor.num_shards
        self.uplinks = [Fifo() for _ in range(n)]
        self.downlinks = [Fifo() for _ in range(n)]
        self.servers = [Fifo() for _ in range(n)]
        self.arrivals = [0] * n      # pushes each shard received
        self.wakes = [0] * n         # of them, those that found it idle
        self.served_s = [0.0] * n    # its simulated service time in all
        self.jitter = ComputeJitter(time.jitter_cv, executor.cfg.run.seed)
        self.computed_s = [time.compute_s] * len(executor.workers)  # each worker's last step's compute
        self.started_at = [0.0] * len(executor.workers)
        self.round_at = [0.0] * len(executor.workers)  # when each worker's parameters last arrived
        self.flushing: set[int] = set()  # workers whose last, shorter local round is in flight
        self.sent_at = [0.0] * len(executor.workers)
        self.result = SimResult()
        self.q = EventQueue()
        self.active = len(executor.workers)
        self.said_done: set[int] = set()  # ranks whose done event (with the bytes they pushed) was emitted

    # ---- scheduling -------------------------------------------------------
    def _start_step(self, rank: int, t: float) -> None:
        w = self.ex.workers[rank]
        self.ex.now = t
        if w.steps >= self.steps_per_worker:
            last = self.ex.flush(rank, step_s=t - self.round_at[rank])  # a local round cut short still counts
            if last is not None:
                self.flushing.add(rank)
                self._send(last, t)
                return
            released = self.ex.leave(rank)  # as opt.close(): nobody waits for it any more
            self.active -= 1
            self._done(rank, t)
            for reply in released:
                self._send_reply(reply, t)
            return
        compute_s = self.time.compute_s * self.jitter.factor(rank, w.steps)
        self.computed_s[rank] = compute_s
        busy = compute_s + (w.straggler.extra_s(compute_s, t) if w.straggler.active else 0.0)
        self.ex.now = t + busy  # a local round's pace is read when its last step ends
        pushes = self.ex.compute(rank, step_s=t + busy - self.round_at[rank])
        self.started_at[rank] = t
        if pushes is None:
            self.q.put(t + busy, Kind.LOCAL_DONE, rank)
        else:
            self.q.put(t + busy, Kind.STEP_DONE, pushes)

    def _local_done(self, rank: int, t: float) -> None:
        w = self.ex.workers[rank]
        self.result.steps += 1
        self.emit(event(t, Role.WORKER, rank, Event.STEP, rank=rank, clock=w.clock, loss=w.last_loss,
                        compute_s=round(self.computed_s[rank], 9), comm_s=0.0,
                        step_s=round(t - self.started_at[rank], 9), gap=0))
        self._start_step(rank, t)

    def _send(self, pushes: list[Push], t: float) -> None:
        self.sent_at[pushes[0].rank] = t
        for p in pushes:
            end = self.uplinks[p.shard].occupy(t, self.time.transfer_s(p.wire_bytes))
            self.q.put(end + self.time.latency_s, Kind.ARRIVE, p)

    def _arrive(self, p: Push, t: float) -> None:
        server = self.servers[p.shard]
        idle = self.time.finds_idle(server.free_at, t)
        service_s = self.time.service_s(self.ex.layout.shard_sizes[p.shard], idle)
        self.arrivals[p.shard] += 1
        self.wakes[p.shard] += idle
        self.served_s[p.shard] += service_s
        done = server.occupy(t, service_s)
        self.q.put(done, Kind.SERVED, p)

    def _served(self, p: Push, t: float) -> None:
        for reply in self.ex.serve_push(p):  # to parked pulls the push released
            self._send_reply(reply, t)
        self.ex.recycle(p)
        reply = self.ex.try_answer(p.shard, p.rank)  # the pull the push carries (push_pull); None: parked
        if reply is not None:
            self._send_reply(reply, t)

    def _send_reply(self, reply: Reply, t: float) -> None:
        end = self.downlinks[reply.shard].occupy(t, self.time.transfer_s(4 * reply.params.numel()))
        self.q.put(end + self.time.latency_s, Kind.REPLY, reply)

    def _reply(self, r: Reply, t: float) -> None:
        if not self.ex.receive(r):
            return
        w = self.ex.workers[r.rank]
        self.round_at[r.rank] = t
        if r.rank in self.flushing:  # the reply to a flushed round: no training step of its own
            self.flushing.discard(r.rank)
            self._start_step(r.rank, t)
            return
        self.result.steps += 1
        self.emit(event(t, Role.WORKER, r.rank, Event.STEP, rank=r.rank, clock=w.clock, loss=w.last_loss,
                         compute_s=round(self.computed_s[r.rank], 9), comm_s=round(t - self.sent_at[r.rank], 9),
                         step_s=round(t - self.started_at[r.rank], 9), gap=w.clock - min(x.min_clock for x in
                                                                                            w.replies.values())))
        self._start_step(r.rank, t)

    def _evaluate(self, t: float, final: bool = False) -> bool:
        for shard in self.ex.shards:
            self.emit(event(t, Role.SERVER, shard.shard, Event.SERVER_STATS, **shard.stats()))
        record = event(t, Role.EVALUATOR, 0, Event.EVAL, **({"final": True} if final else {}), **self.ex.evaluate())
        self.result.evals.append(record)
        self.emit(record)
        return self.stop(record)

    def _done(self, rank: int, t: float) -> None:
        w = self.ex.workers[rank]
        self.said_done.add(rank)
        self.emit(event(t, Role.WORKER, rank, Event.DONE, rank=rank, clock=w.clock, steps=w.steps, pushes=w.seq,
                         resends=0, bytes_sent=w.encoder.wire_bytes, fp32_bytes=w.encoder.fp32_bytes,
                         compression_ratio=round(w.encoder.compression_ratio, 6)))

    # ---- the loop ---------------------------------------------------------
    def run(self) -> SimResult:
        for w in self.ex.workers:
            self._start_step(w.rank, 0.0)
        if self.eval_every_s:
            self.q.put(0.0, Kind.EVALUATE, None)
        handlers = {Kind.STEP_DONE: self._send, Kind.ARRIVE: self._arrive, Kind.SERVED: self._served,
                    Kind.REPLY: self._reply, Kind.LOCAL_DONE: self._local_done}
        t, ended = 0.0, False
        while self.q and self.active > 0:
            t, kind, data = self.q.pop()
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
            blocked = [w.rank for w in self.ex.workers if w.steps < self.steps_per_worker]
            raise RuntimeError(f"the simulated run stopped with workers {blocked[:8]} waiting on a shard "
                               "that will never answer")
        for w in self.ex.workers:  # stopped by the clock or the target: a real worker says done as it exits
            if w.rank not in self.said_done:
                self._done(w.rank, t)
        self.result.end_s = t
        self._evaluate(t, final=True)
        return self.result
