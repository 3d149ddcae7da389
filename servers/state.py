"""One shard's state and the rules for changing it, without any sockets.

ShardState owns the flat parameter tensor, the update rule, the clocks and
the counters. The event loop in shard.py decodes requests and calls these
methods; everything here is synchronous and single-threaded.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Optional, Union

import torch

from psgd.config import Config
from psgd.core.histogram import Histogram
from psgd.core.local_methods.optimizers import server_optimizer
from psgd.core.modes.policy import ClockBoard, ConsistencyPolicy, Finished, Mode, PushAction, Update
from psgd.core.modes.quorum import GraceWindow
from psgd.core.rules.updater import ShardUpdater
from psgd.servers.live_control import ShardLive
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["ShardState", "PushStatus", "PushResult"]

COW_WAIT_S = 0.0005  # how long an update waits for an in-flight reply before copying instead


class PushStatus(str, Enum):
    APPLIED = "applied"          # applied now (on arrival)
    BUFFERED = "buffered"        # counted toward the current clock's aggregate (bsp)
    DUPLICATE = "duplicate"      # seq already seen: a resend, not applied again
    LATE = "late"                # the clock was already applied (bsp backup workers)
    CARRIED = "carried"          # its round was already merged: counted toward the next merge (quorum)
    TOO_STALE = "too_stale"      # staleness above max_staleness_drop
    NON_FINITE = "non_finite"    # NaN or Inf in the gradient
    NON_FINITE_RESULT = "non_finite_result"  # finite, but applying it would make the parameters non-finite


@dataclass(frozen=True)
class PushResult:
    status: PushStatus
    staleness: int = 0


class ShardState:
    """`run_token` lets `psgd ctl` change the live settings; `emit` reports changes
    (the shard's event log)."""

    def __init__(self, cfg: Config, shard: int, params: torch.Tensor, run_token: Optional[str] = None,
                 emit: Callable[..., None] = lambda event, **fields: None):
        self.cfg = cfg
        self.shard = shard
        self.mode = Mode(cfg.consistency.mode)
        self.workers = cfg.cluster.workers
        self.params = params.detach().clone().float().contiguous()
        self._numel = self.params.numel()  # fixed: copy-on-write replaces the tensor, never its size
        self.rule = ShardUpdater(server_optimizer(cfg), self.params)
        # The one rule for pulls and pushes; it owns the mode's behaviour, the clocks and the live settings.
        self.policy = ConsistencyPolicy.from_config(cfg, lr=self.rule.cfg.lr, numel=self.params.numel())
        self.version = 0                       # updates applied to this shard
        self.last_seq = [-1] * self.workers    # exactly-once: highest push seq seen per worker
        self.last_seen: dict[int, float] = {}  # worker -> monotonic time of last message
        self.registered: set[int] = set()
        self.counters: Counter[str] = Counter()
        self.staleness_hist = Histogram()      # staleness of every applied gradient
        self.clock_gaps = Histogram()
        self._snapshot: Optional[tuple[int, torch.Tensor]] = None  # DC-ASGD reads only
        self._in_flight: list = []             # trackers of zero-copy replies reading `params`
        self._dense_buf: Optional[torch.Tensor] = None  # sparse gradients scattered for dense rules
        self._read: dict[int, torch.Tensor] = {}  # DC-ASGD: parameters each worker last read
        self.live = ShardLive(self.policy, run_token, emit)  # psgd ctl; setting_change events
        # consistency.quorum: when rounds reached their quorum, and the grace window (the service times it)
        quorum = cfg.consistency.quorum
        self.grace: Optional[GraceWindow] = GraceWindow(quorum) if quorum is not None else None

    @property
    def numel(self) -> int:
        return self._numel

    def report_to(self, emit: Callable[..., None],
                  journal: Callable[[int, str, dict], None] = lambda clock, origin, fields: None) -> None:
        """From now on send setting changes (the adaptive bound's, psgd ctl's) to `emit`,
        and make each psgd ctl change durable with `journal` before it is confirmed."""
        self.live.emit, self.live.journal = emit, journal

    @property
    def bsp(self):
        """The BSP aggregator (its step, its count) when the mode has one, else None: for reading."""
        return getattr(self.policy.rule, "aggregator", None)

    @property
    def board(self) -> ClockBoard:
        """The workers' clocks and the quorum (kept by the consistency policy)."""
        return self.policy.board

    def live_params(self) -> torch.Tensor:
        """The parameters at the current version, for a zero-copy reply. No copy:
        the caller hands the send's tracker to `sending`, and the next in-place
        update waits for it or, if the send is still running, continues on a
        copy (copy-on-write), so a reply never carries torn parameters."""
        return self.params

    def sending(self, tracker) -> None:
        """Register a send that still reads `live_params()` (anything with `done`
        and `wait(timeout_s)`)."""
        if tracker is not None and not tracker.done:
            if len(self._in_flight) >= 64:  # many reads, no update in between: forget finished sends
                self._in_flight = [t for t in self._in_flight if not t.done]
            self._in_flight.append(tracker)

    def _writable(self) -> torch.Tensor:
        """The live parameters, safe to change in place."""
        if self._in_flight:
            # In a request/reply round trip the previous reply is normally
            # released by now; only a send still on the wire forces a copy.
            busy = [t for t in self._in_flight if not t.wait(COW_WAIT_S)]
            self._in_flight = []
            if busy:
                self.params = self.params.clone()
                self.counters["copy_on_write"] += 1
        return self.params

    def _frozen_copy(self) -> torch.Tensor:
        """An immutable copy at the current version, shared by every reader at it."""
        if self._snapshot is None or self._snapshot[0] != self.version:
            self._snapshot = (self.version, self.params.clone())
        return self._snapshot[1]

    # ---- membership -------------------------------------------------------
    def register(self, rank: int, now: float) -> int:
        """A worker (re)joins; returns the clock it continues from (the mode's behaviour:
        bsp's step in progress; otherwise its own clock on a first registration
        and the slowest other worker's clock when it returns)."""
        self.registered.add(rank)
        self.last_seen[rank] = now
        return self.policy.joined(rank)

    def seen(self, rank: int, now: float) -> None:
        if rank in self.registered:
            self.last_seen[rank] = now

    def leave(self, rank: int) -> None:
        """The worker leaves the quorum and must register again to take part;
        an aggregated step that was only waiting for it is applied now."""
        self.registered.discard(rank)
        self.last_seen.pop(rank, None)
        self._apply_update(self.policy.departed(rank))

    def expire(self, now: float) -> list[int]:
        """Drop workers silent for longer than cluster.timeout_s from the quorum.
        A dropped worker that is still alive gets `not_registered` on its next
        request and re-registers (psgd.workers.client does this by itself)."""
        gone = [r for r, t in self.last_seen.items() if now - t > self.cfg.cluster.timeout_s]
        for r in gone:
            self.counters["workers_timed_out"] += 1
            self.leave(r)
        return gone

    # ---- pushes -----------------------------------------------------------
    def push(self, rank: int, seq: int, clock: int, read_version: int,
             grad: Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]], step_s: float = 0.0,
             steps: int = 1) -> PushResult:
        """Handle one gradient: a dense flat tensor, or sparse (indices, values)
        meaning zero elsewhere. `grad` is read, never modified or kept. `steps`: the
        training steps behind it (a local round's), so its examples are steps x batch.
        Raises ProtocolError, with the state untouched, for an impossible push."""
        self.check_push(rank, clock, read_version)
        if seq <= self.last_seq[rank]:
            self.counters["duplicates"] += 1
            return PushResult(PushStatus.DUPLICATE)
        if seq > self.last_seq[rank] + 1:
            # Seqs this shard never saw: pushes another shard applied before the worker
            # died mid-send (its successor continues after them). Reported, not hidden.
            self.counters["partial_pushes"] += seq - self.last_seq[rank] - 1
        self.last_seq[rank] = seq
        self.counters["pushes"] += 1
        self._use_lr(self.policy.pushed(rank, clock, step_s))
        staleness = self.version - read_version  # >= 0: check_push refused a read_version ahead of the shard
        sparse = isinstance(grad, tuple)  # (indices, values); asked once
        read = self._read.get(rank) if self._read else None
        grad_max = self.rule.grad_bound(self.params, grad[1] if sparse else grad, staleness, read)  # the check and the bound
        if not math.isfinite(grad_max):
            self.counters["rejected_nonfinite"] += 1
            return self._finish_push(rank, clock, PushResult(PushStatus.NON_FINITE, staleness))
        action = self.policy.push_action(staleness)
        if sparse and (action is PushAction.AGGREGATE or not self.rule.sparse_exact):
            grad, grad_max, sparse = self._dense(*grad), None, False  # a repeated index sums its values
        if action is PushAction.AGGREGATE:
            return self._finish_push(rank, clock, PushResult(PushStatus.BUFFERED, staleness), grad=grad,
                                     weight=float(steps * self.cfg.task.batch_size))
        if action is PushAction.DROP_STALE:
            self.counters["rejected_stale"] += 1
            return self._finish_push(rank, clock, PushResult(PushStatus.TOO_STALE, staleness))
        if sparse:
            applied = self.rule.apply_sparse(self._writable(), grad[0], grad[1], staleness)
        else:
            applied = self.rule.apply_if_finite(self._writable(), grad, staleness, read, grad_max)
        if not applied:
            self.counters["rejected_nonfinite_result"] += 1
            return self._finish_push(rank, clock, PushResult(PushStatus.NON_FINITE_RESULT, staleness))
        self._applied(self._numel, [staleness])
        return self._finish_push(rank, clock, PushResult(PushStatus.APPLIED, staleness))

    def _dense(self, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """A sparse gradient scattered into a reused zero buffer (for rules that
        touch every coordinate, and for an aggregate)."""
        if self._dense_buf is None:
            self._dense_buf = torch.zeros(self.numel)
        else:
            self._dense_buf.zero_()
        return self._dense_buf.index_add_(0, indices, values)

    def check_push(self, rank: int, clock: int, read_version: int) -> None:
        if rank not in self.registered:
            raise ProtocolError(ErrorCode.NOT_REGISTERED, f"worker {rank} has not registered with shard {self.shard}")
        if read_version > self.version:
            raise ProtocolError(ErrorCode.BAD_VERSION, f"read_version {read_version} is ahead of the shard ({self.version})")
        refusal = self.policy.push_refusal(clock)
        if refusal is not None:
            raise ProtocolError(ErrorCode.BAD_CLOCK, refusal)

    def _finish_push(self, rank, clock, result: PushResult, grad=None, weight: float = 1.0) -> PushResult:
        """`grad`: a gradient the mode aggregates, weighing `weight` examples (None:
        applied already, or rejected)."""
        done: Finished = self.policy.finished(rank, clock, result.staleness, grad, weight)
        if done.late:
            self.counters["late_dropped"] += 1
            result = PushResult(PushStatus.LATE, result.staleness)
        if done.carried:
            self.counters["quorum_carried"] += 1
            if result.status is PushStatus.BUFFERED:
                result = PushResult(PushStatus.CARRIED, result.staleness)
        if done.bound_change is not None:  # rare: most pushes change no bound and complete no round
            self.live.bound_changed(done.bound_change)
        if done.update is not None and not self._apply_update(done.update):  # a completed round's step refused
            result = PushResult(PushStatus.NON_FINITE_RESULT, result.staleness)
        return result

    def close_round(self) -> bool:
        """The quorum's grace window for the round in progress passed: merge it now if q
        deltas are in (else at the q-th). True when a merge happened (the shard journals it)."""
        update = self.policy.close_round()
        if update is None:
            return False
        self.counters["quorum_closed_by_grace"] += 1
        self._apply_update(update)
        return True

    def _use_lr(self, lr: float) -> None:
        """Apply the next gradient at `lr` (the rate in force at its clock: psgd ctl changes it)."""
        if lr != self.rule.cfg.lr:
            self.rule.cfg = replace(self.rule.cfg, lr=lr)

    def _apply_update(self, update: Optional[Update]) -> bool:
        """An aggregated step the mode's behaviour completed (its mean; None: every push was rejected).
        False when the step was refused: it would make the parameters or the state non-finite
        (the round's earlier pushes were acknowledged as counted)."""
        if update is None or update.grad is None:
            return True
        if not self.rule.apply_if_finite(self._writable(), update.grad, max(update.staleness, default=0)):
            self.counters["rejected_nonfinite_result"] += 1
            return False
        self._applied(update.grad.numel(), update.staleness)
        return True

    def _applied(self, numel: int, staleness: list[int]) -> None:
        self.version += 1
        self.counters["updates"] += 1
        self.counters["bytes_applied"] += numel * 4
        for s in staleness:
            self.staleness_hist.add(s)

    # ---- pulls ------------------------------------------------------------
    def pull_ready(self, rank: int, clock: int) -> bool:
        return self.policy.pull_ready(rank, clock)

    def answer_pull(self, rank: int, clock: int) -> tuple[torch.Tensor, int, int]:
        """(parameters, clock, slowest quorum clock) for a worker's ready pull; records the gap."""
        clock, low = self.policy.answered(rank, clock)
        self.clock_gaps.add(clock - low if clock > low else 0)
        self.counters["pulls"] += 1
        if self.cfg.optimizer.dc_asgd is not None:
            self._read[rank] = self._frozen_copy()
        return self.params, clock, low  # live_params(): the live tensor, under copy-on-write

    def stats(self) -> dict:
        return {
            "shard": self.shard,
            "version": self.version,
            "counters": dict(self.counters),
            "staleness_hist": self.staleness_hist.as_dict(),
            "clock_gap_hist": self.clock_gaps.as_dict(),
            "clocks": list(self.board.clocks),
            "quorum": self.board.quorum(),
            "live": self.live.describe(),
            **({"quorum_grace": self.grace.describe()} if self.grace is not None else {}),
        }
