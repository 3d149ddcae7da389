"""What each request does to one shard, without sockets: one method per request.

The shard's event loop (servers/shard.py) and the virtual cluster
(psgd/sim/executor.py) both call these methods and send what the result
says, in its order: the pulls answered now (parked ones that became ready,
then the request's own), the parked pulls to refuse. Here live what a request
does beyond the state's own rules (servers/state.py): the checks of a push's
fields, pull parking, the workers' step speeds, and forgetting a rank that
left. Synchronous and single-threaded, like the state. The results are plain
(not frozen) dataclasses: the simulator makes one per push.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch

from psgd.config.local_updates import MAX_LOCAL_STEPS
from psgd.core.clocks import DeferredPulls
from psgd.core.local_methods.pace import StepSpeeds
from psgd.servers.peers import check_ahead, check_slot
from psgd.servers.pull_waits import PullWaits
from psgd.servers.state import PushResult, PushStatus, ShardState
from psgd.wire.protocol import ErrorCode, ProtocolError

__all__ = ["ShardService", "PushFields", "Answer", "Served", "Joined", "Pushed", "Departed", "Ticked",
           "MAX_PULL_AHEAD"]

MAX_PULL_AHEAD = 2  # a pipelined worker asks for the parameters of the clock after next

Gradient = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]
_COUNTED = {status: f"push_{status.value}" for status in PushStatus}  # the counter of each push outcome


@dataclass
class PushFields:
    """A push's fields as the shard checks them. `ahead` > 0: the push carries a
    pull for clock + ahead (push_pull), answered into reply `slot`."""
    rank: int
    seq: int
    clock: int
    read_version: int
    numel: int             # elements the message carries
    dense_piece: bool = False  # a dense piece of a gradient split over messages (may be smaller)
    scale: float = 1.0
    step_s: float = 0.0
    steps: int = 1
    ahead: int = 0
    slot: int = 0


@dataclass
class Answer:
    """A pull answered now: what its reply carries. `token`: what the caller parked with it."""
    token: Any
    rank: int
    clock: int           # the clock answered (never below the rank's own)
    min_clock: int       # the slowest quorum worker's clock
    version: int
    params: torch.Tensor  # the live parameters (the state's copy-on-write guards them: ShardState.sending)
    fastest_step_s: float  # the fastest worker's time per step (local.dynamic)
    held_s: float = 0.0    # how long the pull stayed parked before this answer (0: answered at once)


@dataclass
class Served:
    """What a request leads to, to be sent in this order after the request's own reply
    (a push's ack comes after them)."""
    answers: list[Answer] = field(default_factory=list)
    refused: list[Any] = field(default_factory=list)  # tokens of parked pulls whose worker left


@dataclass
class Joined(Served):
    clock: int = 0       # the clock the worker continues from
    last_seq: int = -1   # the last push seq this shard has from it (exactly-once across restarts)


@dataclass
class Pushed(Served):
    result: Optional[PushResult] = None  # None: a piece held for the push's last message (nothing to send)
    grad: Optional[Gradient] = None      # the gradient handled, for the journal (valid until the next push)


@dataclass
class Departed(Served):
    ranks: list[int] = field(default_factory=list)  # the workers that left the quorum


@dataclass
class Ticked(Served):
    closed: bool = False  # a quorum's grace window closed (the shard journals it: replay repeats it there)


class ShardService:
    def __init__(self, state: ShardState):
        self.state = state
        self.parked = DeferredPulls()  # pulls the mode does not allow yet, answered when clocks move
        self.speeds = StepSpeeds()     # local.dynamic: workers size their rounds by the fastest one's speed
        self._released_at: Optional[tuple] = None  # the policy's readiness when parked pulls were last looked at
        self.waits = PullWaits(state.workers)  # how long pulls stayed parked, and whose request released them
        self._numel = state.numel  # fixed for the state's life; read on every push

    # ---- requests -----------------------------------------------------------
    def register(self, rank: int, now: float) -> Joined:
        """A worker (re)joins. Its earlier incarnation's parked pull has no reader now."""
        self.check_rank(rank)
        self.parked.drop_rank(rank)
        self.waits.dropped(rank)
        clock = self.state.register(rank, now)
        return Joined(answers=self._release(now, rank), clock=clock, last_seq=self.state.last_seq[rank])

    def pull(self, rank: int, clock: int, token: Any, now: float) -> Served:
        """A worker's pull: answered now when the mode allows, else parked."""
        self.check_member(rank)
        check_ahead("clock", clock, self.state.board.clocks[rank])
        self.state.seen(rank, now)
        return Served(answers=self._answer_or_park(token, rank, clock, now))

    def push(self, push: PushFields, now: float, grad: Optional[Gradient], pull: Any = None,
             checked: bool = False) -> Pushed:
        """A worker's push (and, when `push.ahead`, its pull, parked under `pull`), its
        gradient decoded (None: a piece held for the push's last message). Raises
        ProtocolError, the state untouched, for a push that cannot be: the caller that
        decodes calls `check_push` first, so a bad push is refused before its payload is
        read, and says so with `checked` (nothing between the two can change what it checks)."""
        if not checked:
            self.check_push(push)
        self.state.seen(push.rank, now)
        if grad is None:
            return Pushed()
        quorum = self.state.policy.quorum  # None but under consistency.quorum: then two calls fewer per push
        merged = quorum.step if quorum is not None else 0
        result = self.state.push(push.rank, push.seq, push.clock, push.read_version, grad, push.step_s, push.steps)
        self.speeds.observe(push.rank, push.step_s, push.steps)
        if result.status is not PushStatus.DUPLICATE:
            self.state.counters[_COUNTED[result.status]] += 1
            if quorum is not None:
                self._watch_quorum(now, merged, push.clock)
        answers = self._release(now, push.rank)
        if push.ahead:
            answers += self._answer_or_park(pull, push.rank, push.clock + push.ahead, now)
        return Pushed(answers=answers, result=result, grad=grad)

    def leave(self, rank: int, now: float = 0.0) -> Departed:
        """A worker leaves the quorum (it must register again to take part)."""
        merged = self._merged()
        self.state.leave(rank)
        self._watch_quorum(now, merged)
        return self._departed([rank], now)

    def expire(self, now: float) -> Departed:
        """Workers silent for longer than cluster.timeout_s leave the quorum."""
        merged = self._merged()
        gone = self.state.expire(now)
        self._watch_quorum(now, merged)
        return self._departed(gone, now)

    # ---- the quorum's grace window (consistency.quorum) ----------------------------
    def deadline(self) -> Optional[float]:
        """When the open grace window closes (None: none is open): the caller calls
        `tick` then, on its own clock (the shard's loop, or the virtual cluster's)."""
        return self.state.grace.deadline if self.state.grace is not None else None

    def tick(self, now: float) -> Ticked:
        """Close a grace window whose deadline has passed: its round merges now if q
        deltas are in (else at the q-th); returns the pulls that released."""
        window = self.state.grace
        if window is None or not window.due(now):
            return Ticked()
        merged = self._merged()
        window.deadline = None
        self.state.close_round()
        self._watch_quorum(now, merged)
        return Ticked(answers=self._release(now), closed=True)

    def _merged(self) -> int:
        """Rounds the quorum rule has merged (0 without one)."""
        rule = self.state.policy.quorum
        return rule.step if rule is not None else 0

    def _watch_quorum(self, now: float, merged_before: int, arrived: Optional[int] = None) -> None:
        """After a request: a delta of round `arrived` came at `now` (its lag, if late),
        rounds merged since `merged_before` close their windows, and the round in
        progress opens its window once q deltas are in."""
        rule, window = self.state.policy.quorum, self.state.grace
        if rule is None:
            return
        if arrived is not None:
            window.arrived(arrived, now)
        for r in range(merged_before, rule.step):
            window.reached(r, now, waits=False)
            window.merged(r)
        if rule.reached():
            window.reached(rule.step, now, rule.waits)

    def expire_hold(self, now: float) -> Served:
        """A psgd ctl change that was never committed stops holding pulls."""
        return Served(answers=self._release(now) if self.state.live.expire(now) else [])

    def control(self, op: str, token: str, clock: int, settings: dict, now: float,
                owner: str = "") -> tuple[int, dict, Served]:
        """A psgd ctl request: (clock, detail) for its reply, then the pulls a commit or
        an abort released. Raises ControlError, the state untouched, for a refused one."""
        clock, detail = self.state.live.control(op, token, clock, settings, now, owner=owner)
        if op == "status":
            detail = {**detail, **self.status(now)}
        return clock, detail, Served(answers=self._release(now))

    # ---- checks -----------------------------------------------------------
    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.state.workers:
            raise ProtocolError(ErrorCode.BAD_RANK, f"rank {rank} outside 0..{self.state.workers - 1}")

    def check_member(self, rank: int) -> None:
        if rank not in self.state.registered:
            raise ProtocolError(ErrorCode.NOT_REGISTERED, f"worker {rank} left the quorum of shard "
                                f"{self.state.shard}; register again")

    def check_push(self, p: PushFields) -> None:
        """Refuse (ProtocolError) a push whose fields this shard cannot take."""
        st = self.state
        if p.numel != self._numel and not p.dense_piece:
            raise ProtocolError(ErrorCode.BAD_SIZE, f"gradient has {p.numel} elements, shard holds {self._numel}")
        if p.clock < 0 or p.seq < 0 or p.read_version < 0:
            raise ProtocolError(ErrorCode.BAD_FIELD, "clock, seq and read_version must be >= 0")
        if not (p.scale > 0 and p.scale < math.inf):
            raise ProtocolError(ErrorCode.BAD_FIELD, "scale must be positive and finite")
        check_ahead("seq", p.seq, st.last_seq[p.rank])
        check_ahead("clock", p.clock, st.board.clocks[p.rank])
        if not (0 <= p.step_s < math.inf):
            raise ProtocolError(ErrorCode.BAD_FIELD, "step_s must be finite and >= 0")
        if not 1 <= p.steps <= MAX_LOCAL_STEPS:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"steps must be in 1..{MAX_LOCAL_STEPS}")
        if p.ahead:
            if not 1 <= p.ahead <= MAX_PULL_AHEAD:
                raise ProtocolError(ErrorCode.BAD_FIELD, f"ahead must be in 1..{MAX_PULL_AHEAD}")
            check_slot(p.slot)

    # ---- pulls --------------------------------------------------------------
    def _answer_or_park(self, token: Any, rank: int, clock: int, now: float) -> list[Answer]:
        if self.state.pull_ready(rank, clock):
            return [self._answer(token, rank, clock)]
        self.state.counters["pulls_deferred"] += 1
        self.waits.parked(rank, clock, now)
        if self.parked.park((token, rank, clock), rank, clock) is not None:  # memory per peer: one parked pull
            self.state.counters["pulls_superseded"] += 1
        if self._released_at is not None:
            now = self.state.policy.readiness()
            if now is None or now < self._released_at:  # it moved back after all: trust no earlier look
                self._released_at = None
        return []

    def _release(self, now: float, by: Optional[int] = None) -> list[Answer]:
        """Answer the parked pulls that became ready, in arrival order. Skips the look
        while the policy says nothing a parked pull waits on has moved. `by`: the rank
        whose request (a push, a join, a leave) moved it, charged with the wait it ended."""
        if not self.parked:  # its __len__, without a len() call around it
            return []
        readiness = self.state.policy.readiness()
        if readiness is not None and readiness == self._released_at:
            return []
        self._released_at = readiness
        answers = [self._answer(*parked) for parked in self.parked.release(self.state.pull_ready)]
        for answer in answers:
            answer.held_s = self.waits.released(answer.rank, now, by)
        return answers

    def status(self, now: float) -> dict:
        """What a live view shows (`psgd ctl RUN_DIR status`); reads, never changes, the state."""
        board, seen = self.state.board, self.state.last_seen
        return {"shard": self.state.shard, "version": self.state.version, "clocks": list(board.clocks),
                "quorum": board.quorum(), "slowest_clock": board.min_clock(),
                "last_heard_s": [round(now - seen[r], 3) if r in seen else None for r in range(len(board.clocks))],
                "parked": self.waits.open(now), **self.waits.totals()}

    def _answer(self, token: Any, rank: int, clock: int) -> Answer:
        params, clock, low = self.state.answer_pull(rank, clock)
        return Answer(token, rank, clock, low, self.state.version, params, self.speeds.fastest())

    def _departed(self, ranks: list[int], now: float) -> Departed:
        """Forget what the request side keeps of ranks that left (the state has let them go).
        The waits their leaving ended are charged to the first of them."""
        refused: list[Any] = []
        for rank in ranks:
            self.speeds.forget(rank)
            self.waits.dropped(rank)
            refused += [token for token, _, _ in self.parked.drop_rank(rank)]
        return Departed(answers=self._release(now, ranks[0]) if ranks else [], refused=refused, ranks=list(ranks))
