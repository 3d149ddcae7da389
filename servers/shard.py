"""The parameter-server shard process: one ROUTER socket, one event loop.

The loop never blocks on a client: pulls that the consistency mode does not
allow yet are parked and answered when clocks move. Every request is decoded
and checked before it can touch the state; a bad one gets an ERROR reply and
is counted. Public entry point: `ShardServer` (embed a shard in your own
process); `psgd server` and `psgd.serve` start one through serve.py.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import MethodType
from typing import Callable, Optional

import torch

from psgd.config import Config, Role
from psgd.runtime.event_names import Event
from psgd.runtime.events import EventLog
from psgd.runtime.host import CpuMeter
from psgd.runtime.safe_io import WriteFailed
from psgd.wire import protocol as P
from psgd.wire.codecs import dense_codec
from psgd.wire.codecs.runs import Plan, Run, plan_fingerprint
from psgd.wire.payload import payload_frames
from psgd.wire.protocol import MsgType, ProtocolError
from psgd.wire.shm.doorbell import Bells
from psgd.wire.shm.links import ShardSegments, shared_memory_wanted
from psgd.wire.transport import CurveKeys, ServerSocket

# isort: split
# The server role's own modules, after the layers below it.
from psgd.servers.checkpoint import ShardCheckpoint
from psgd.servers.live_control import ControlError
from psgd.servers.param_replies import ParamReplies
from psgd.servers.peers import PeerTable, check_slot
from psgd.servers.push_decode import PushDecoder
from psgd.servers.record import ShardRecorder
from psgd.servers.service import Answer, PushFields, Served, ShardService
from psgd.servers.state import PushStatus, ShardState

__all__ = ["ShardServer", "bind_shard"]

# Push outcomes acknowledged as applied: applied now, or counted toward a merge to come.
_COUNTED_IN = (PushStatus.APPLIED, PushStatus.BUFFERED, PushStatus.CARRIED)

STATS_EVERY_S = 1.0
EVALUATOR_RANKS = 4  # the run's evaluator is rank 0; a few more for observers. Bounds their segments.
IDLE_WAIT_MS = 50  # the longest a wait for requests lasts: the loop's timers run at least this often
EXPIRE_SHARE = 0.02  # look for silent workers every 2% of cluster.timeout_s: they leave within 1.02x of it

def bind_shard(cfg: Config, address: str, curve: Optional[CurveKeys] = None) -> ServerSocket:
    """A shard's ROUTER socket bound to `address` (TransportError if it is taken)."""
    return ServerSocket(address, cfg.wire.max_message_mb << 20, curve=curve, bells=Bells())


class ShardServer:
    """Serves one shard. `serve` blocks until `stop` is set or a SHUTDOWN arrives."""

    def __init__(self, cfg: Config, shard: int, address: str, params: torch.Tensor,
                 fingerprint: str, events: Optional[EventLog] = None,
                 clock: Callable[[], float] = time.monotonic,
                 checkpoint: Optional[ShardCheckpoint] = None, curve: Optional[CurveKeys] = None,
                 run_token: Optional[str] = None, record_to: Optional[Path] = None,
                 push_plan: Optional[Plan] = None, sock: Optional[ServerSocket] = None,
                 state: Optional[ShardState] = None):
        """`record_to`: the file that records this shard's state changes for `psgd replay`.
        `push_plan`: the runs workers' pushes come in (psgd.wire.codecs.runs.push_plans);
        None: one run, in whatever encoding each push names. `sock`: the address already
        bound (a backup that took it over, servers/standby.py); `state`: the state it
        rebuilt from the primary's log, whose checkpoint files it has adopted."""
        self.cfg = cfg
        # What each request does (parking, speeds, checks) over the state: this class only carries it.
        self.service = ShardService(state if state is not None else ShardState(cfg, shard, params, run_token=run_token))
        self.state = self.service.state
        # Snapshot + log of everything applied since (None: in-memory only).
        self.checkpoint = checkpoint
        self.resumed = checkpoint.resume(self.state) if checkpoint is not None and state is None else None
        # After the resume: a restarted shard's record says so (replay covers runs without restarts).
        self.recorder = (ShardRecorder(record_to, shard, self.state.numel, lambda: self.state.version)
                         if record_to is not None else None)
        self.fingerprint = fingerprint
        plan = push_plan or (Run("none", 0, self.state.numel),)
        self._register_fingerprint = plan_fingerprint(fingerprint, plan)  # a client with another plan is refused
        self.events = events or EventLog(None, "server", shard)
        # After the replay above, which must not report or journal its changes again.
        self.state.report_to(self.events.emit, lambda clock, origin, fields: self._journal(
            "log_setting", clock, origin, fields))
        self._clock = clock
        self._sock = sock if sock is not None else bind_shard(cfg, address, curve)
        self._bells = self._sock.bells  # doorbells of same-host clients (psgd.wire.shm.doorbell): the socket polls them
        self.address = self._sock.address
        self._sock.on_cut_off = self._cut_off
        self._peers = PeerTable(run_token)  # who may act for which rank (peers.py)
        self._running = False
        self._busy_s, self._served = 0.0, 0  # time spent handling requests, and how many
        self._numel = self.state.numel  # read on every push: an attribute, not the property
        # The codec's own time decoding whole gradients; None before the first. Summed here and
        # rounded into the counters when stats are read, not rounded once per push.
        self._decode_s: Optional[float] = None
        self._cpu = CpuMeter()  # the process's CPU from serve() on (every thread's), in its stats
        # Same-host clients' shared-memory segments (psgd.wire.shm.segment).
        self._shm = ShardSegments(4 * self.state.numel, shared_memory_wanted(cfg.wire.shared_memory, curve is not None),
                                  self._bells)
        self._decode = PushDecoder(self.state.numel, self._shm, plan)
        self._params = ParamReplies(cfg, self.state, self._sock, self._shm)  # how parameters leave
        self._handlers = {kind: MethodType(handler, self) for kind, handler in _HANDLERS.items()}

    @property
    def _parked(self):
        """The service's parked pulls (read by tests written when the shard kept them)."""
        return self.service.parked

    # ---- loop -------------------------------------------------------------
    def serve(self, stop: threading.Event, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Raises WriteFailed (naming the file) when a checkpoint write fails:
        nothing more can be acknowledged durably, so the shard stops."""
        self._running = True
        self._cpu.restart()
        last_stats = last_expire = last_sweep = self._clock()
        failed = crashed = False
        try:
            while self._running and not stop.is_set() and not should_stop():
                # Every request queued at a wake-up is served (each whole, in the order read) before the
                # housekeeping below: under many workers one poll and one round of timers cover a burst.
                batch = self._sock.recv_batch(self._wait_ms() if self.state.grace is not None else IDLE_WAIT_MS)
                if batch:
                    started = time.perf_counter()
                    self._served += self._handle_batch(batch)
                    self._busy_s += time.perf_counter() - started  # `psgd sim calibrate` reads the service time
                now = self._clock()
                # Timeouts are seconds long: scanning every worker after every message is wasted work.
                if now - last_expire >= EXPIRE_SHARE * self.cfg.cluster.timeout_s:
                    last_expire = now
                    gone = self.service.expire(now)
                    for rank in gone.ranks:
                        self._forget(rank, Event.WORKER_TIMED_OUT)
                    self._send(gone, "timed out: no message for cluster.timeout_s; register again")
                    self._send(self.service.expire_hold(now))  # a psgd ctl change never committed (held for seconds)
                if now - last_sweep >= self.cfg.cluster.timeout_s:  # evaluators send no heartbeats
                    self._shm.release_idle(Role.EVALUATOR)
                    last_sweep = now
                if self.state.grace is not None:  # a quorum's grace window may close
                    self._tick(now)
                if self.checkpoint is not None and self.checkpoint.due(self.state):
                    self.checkpoint.save(self.state)
                if now - last_stats >= STATS_EVERY_S:
                    self.emit_stats()
                    last_stats = now
        except WriteFailed:
            failed = True
            raise
        except BaseException:
            crashed = True
            raise
        finally:
            if self.checkpoint is not None:
                if not failed:
                    self.checkpoint.save(self.state)  # a clean stop resumes without replay
                self.checkpoint.close()
            if self.recorder is not None:
                self.recorder.close(ended=not (failed or crashed))
            self.emit_stats(final=True)
            self._sock.close()
            self._shm.close()

    def _handle_batch(self, batch: list) -> int:
        """Handle `batch` in order; returns how many (a SHUTDOWN stops the rest, as it stops the loop)."""
        for done, (identity, frames) in enumerate(batch, 1):
            self.handle(identity, frames)
            if self.checkpoint is not None and self.checkpoint.due(self.state):
                self.checkpoint.save(self.state)  # due between requests, as when each had its wake-up
            if not self._running:
                return done
        return len(batch)

    def _wait_ms(self) -> int:
        """How long the loop may wait for a request: until a quorum's grace window closes, at most 50 ms."""
        deadline = self.service.deadline()
        if deadline is None:
            return IDLE_WAIT_MS
        return max(0, min(IDLE_WAIT_MS, math.ceil(1000 * (deadline - self._clock()))))

    def _tick(self, now: float) -> None:
        """A quorum's grace window that has passed closes (journaled: a replay closes it there too)."""
        ticked = self.service.tick(now)
        if ticked.closed:
            self._journal("log_close")
            self._send(ticked)

    def handle(self, identity: bytes, frames: list) -> None:
        req = 0
        try:
            record, payload = P.decode(frames)
            req = record.req
            handler = self._handlers.get(record.TYPE)
            if handler is None:
                raise ProtocolError(P.ErrorCode.NOT_A_REQUEST, f"{record.TYPE.name} is a reply, not a request")
            if len(payload) != payload_frames(record):
                raise ProtocolError(P.ErrorCode.BAD_FRAMES, f"{record.TYPE.name} ({getattr(record, 'encoding', '')}) carries "
                                                  f"{payload_frames(record)} payload frame(s), got {len(payload)}")
            handler(identity, record, payload)
        except ProtocolError as exc:
            self.state.counters["bad_requests"] += 1
            self.state.counters[f"bad_requests_{exc.code}"] += 1
            self._reply(identity, P.Error(req=req, code=exc.code, reason=exc.reason))

    def _journal(self, op: str, *args, **replay_only) -> None:
        """`replay_only`: what the replay record needs and a restart does not."""
        if self.checkpoint is not None:
            getattr(self.checkpoint, op)(*args)
        if self.recorder is not None:
            getattr(self.recorder, op)(*args, **replay_only)

    def _reply(self, identity: bytes, record: P.Record, frames=()) -> None:
        self._sock.send(identity, P.encode(record, frames))

    def _reply_params(self, identity: bytes, record: P.Record, params: torch.Tensor) -> None:
        self._params.live(identity, record, params)

    def _send(self, served: Served, reason: str = "") -> None:
        """Send what a request led to: refusals of parked pulls whose worker left (with
        `reason`, so a worker that is in fact alive re-registers instead of waiting),
        then the pulls answered now."""
        for identity, pull in served.refused:
            self._reply(identity, P.Error(req=pull.req, code=P.ErrorCode.NOT_REGISTERED, reason=reason))
        for answer in served.answers:
            self._send_params(answer)

    def _forget(self, rank: int, event: Event) -> None:
        """A worker left the quorum (the service forgot it): what the transport kept for
        it goes, and its departure is reported and journaled."""
        self._peers.release(rank)
        self._decode.forget(rank)
        self._shm.release_rank(Role.WORKER, rank)
        self.events.emit(event, rank=rank, clock=self.state.board.clocks[rank])
        self._journal("log_depart", rank)

    def _cut_off(self, identity: bytes) -> None:
        """A peer's reply queue is full (it does not read): its replies are dropped
        until it reads again. Counted here; the socket counts the dropped replies."""
        self.state.counters["peers_cut_off"] += 1
        role = self._peers.roles.get(identity)
        self.events.emit(Event.PEER_CUT_OFF, role=role[0] if role else None, rank=role[1] if role else None)

    # ---- handlers ---------------------------------------------------------
    def _on_register(self, identity: bytes, rec: P.Register, payload: list) -> None:
        if payload:
            raise ProtocolError(P.ErrorCode.BAD_FRAMES, "REGISTER carries no frames")
        if rec.fingerprint != self._register_fingerprint:  # the shard's own fingerprint is never told
            raise ProtocolError(P.ErrorCode.LAYOUT_MISMATCH, "the client's parameter layout differs from this shard's: "
                                "model, shard count, parameter order or wire.compression's runs differ")
        if rec.role not in (Role.WORKER, Role.EVALUATOR):
            raise ProtocolError(P.ErrorCode.BAD_ROLE, f"unknown role {rec.role!r}")
        joined = None
        if rec.role == Role.WORKER:
            self.service.check_rank(rec.rank)
        elif not 0 <= rec.rank < EVALUATOR_RANKS:
            raise ProtocolError(P.ErrorCode.BAD_RANK, f"evaluator rank {rec.rank} outside 0..{EVALUATOR_RANKS - 1}")
        session = self._peers.register(identity, rec.role, rec.rank, self._sock.peer_key, rec.token)
        if rec.role == Role.WORKER:
            joined = self.service.register(rec.rank, self._clock())
            self._journal("log_join", rec.rank)
            self.events.emit(Event.REGISTER, rank=rec.rank, clock=joined.clock)
        shm = self._shm.attach(identity, rec.role, rec.rank, rec.shm, rec.shm_token, req=rec.req)
        if rec.shm:
            self.state.counters["shm_attached" if shm else "shm_refused"] += 1
        bell = self._shm.open_bell(identity, rec.bell) if shm else False
        if rec.bell:
            self.state.counters["bells_opened" if bell else "bells_refused"] += 1
        snap = self.state.live_params()
        welcome = P.Welcome(req=rec.req, shard=self.state.shard, version=self.state.version,
                            clock=joined.clock if joined else 0, last_seq=joined.last_seq if joined else -1,
                            session=session, shm=shm, bell=bell)
        enc = self._params.encoded(snap, self.state.version) if rec.role == Role.WORKER else None
        if enc is None:
            self._reply_params(identity, welcome, snap)
        else:  # a worker reads its parameters in the reply encoding from the start
            self._params.send_encoded(identity, welcome, enc)
        if joined is not None:
            self._send(joined)

    def _on_pull(self, identity: bytes, rec: P.Pull, payload: list) -> None:
        if payload:
            raise ProtocolError(P.ErrorCode.BAD_FRAMES, "PULL carries no frames")
        check_slot(rec.slot)
        if self._peers.role_of(identity) == Role.EVALUATOR:
            snap = self.state.live_params()
            self._reply_params(identity, P.Params(req=rec.req, version=self.state.version, numel=snap.numel(),
                                                  shm=self._shm.reply(identity, rec.req, snap, rec.slot)), snap)
            return
        self._peers.check_worker(identity, rec.rank)
        self._send(self.service.pull(rec.rank, rec.clock, (identity, rec), self._clock()))

    def _on_push(self, identity: bytes, rec: P.Push, payload: list) -> None:
        self._peers.check_worker(identity, rec.rank)
        piece = P.is_piece(rec, self._numel)
        push_pull = rec.TYPE is MsgType.PUSH_PULL
        fields = PushFields(rec.rank, rec.seq, rec.clock, rec.read_version, rec.numel,
                            dense_piece=piece and dense_codec(rec.encoding), scale=rec.scale, step_s=rec.step_s,
                            steps=rec.steps, ahead=rec.ahead if push_pull else 0, slot=rec.slot if push_pull else 0)
        pull = (identity, P.build(P.Pull, req=rec.req, rank=rec.rank, clock=rec.clock + rec.ahead, slot=rec.slot)) \
            if push_pull else None
        self.service.check_push(fields)  # the fields first: a bad push is refused before its payload is read
        pushed = self.service.push(fields, self._clock(), self._gradient(identity, rec, payload, piece), pull,
                                   checked=True)
        if pushed.result is None:
            return  # a piece held: answered with the push's last message
        if pushed.result.status is not PushStatus.DUPLICATE and (self.checkpoint or self.recorder) is not None:
            self._journal("log_push", rec.rank, rec.seq, rec.clock, rec.read_version, pushed.grad, rec.step_s,
                          rec.steps)  # before the ack and the pulls it released
        self._send(pushed)
        if not push_pull:
            self._reply(identity, P.build(P.Ack, req=rec.req, version=self.state.version,
                                          applied=pushed.result.status in _COUNTED_IN,
                                          staleness=pushed.result.staleness))

    def _gradient(self, identity: bytes, rec: P.Push, payload: list, piece: bool):
        """The push's gradient from its frames or segment; for a piece, the whole gradient
        once its pieces are in (None while a held piece waits for the rest)."""
        if not piece:
            started = time.perf_counter()
            grad = self._decode.gradient(identity, rec, payload)
            self._decode_s = (self._decode_s or 0.0) + (time.perf_counter() - started)  # the codec's own time
            return grad
        if rec.seq <= self.state.last_seq[rec.rank]:  # a piece of a push already applied: nothing to add
            return None if rec.held else torch.empty(0)  # state.push recognises the duplicate before reading it
        self.state.counters["push_pieces"] += 1
        grad = self._decode.piece(rec.rank, rec, payload, identity)
        self.state.counters["push_pieces_shm"] += bool(rec.shm)  # copied from the segment
        if rec.held:
            return None  # answered with the push's last message
        if grad is None:
            raise ProtocolError(P.ErrorCode.MISSING_PIECES, f"push {rec.seq}'s pieces do not cover the gradient")
        return grad

    def _send_params(self, answer: Answer) -> None:
        if self.recorder is not None:  # not the checkpoint's: an answered pull changes no parameter
            self.recorder.log_pull(answer.token[1].rank, answer.token[1].clock)
        self._params.answer(answer)

    def _on_heartbeat(self, identity: bytes, rec: P.Heartbeat, payload: list) -> None:
        self.service.check_rank(rec.rank)
        if not self._peers.heartbeat_ok(rec.rank, rec.session):
            # Counted, not answered: heartbeats never are, and a worker's heartbeat socket
            # still sending the session of a shard that restarted must not pile up replies.
            self.state.counters["bad_heartbeats"] += 1
            return
        self.state.seen(rec.rank, self._clock())

    def _on_leave(self, identity: bytes, rec: P.Leave, payload: list) -> None:
        if self._peers.role_of(identity) == Role.EVALUATOR:  # holds no rank state: only its segment to let go
            self._shm.release(identity)
            self._peers.forget(identity)
            self._reply(identity, P.Ack(req=rec.req, version=self.state.version))
            return
        self._peers.check_worker(identity, rec.rank)
        left = self.service.leave(rec.rank, self._clock())
        self._forget(rec.rank, Event.LEAVE)
        self._send(left, "worker left")
        self._reply(identity, P.Ack(req=rec.req, version=self.state.version))

    def _on_stats(self, identity: bytes, rec: P.Stats, payload: list) -> None:
        self._bell_counters()
        self._reply(identity, P.StatsReply(req=rec.req, stats=self.state.stats()))

    def _bell_counters(self) -> None:
        """The counters kept outside the state, before its stats are read: requests that
        rang a doorbell, bells whose client went away, the codec's decode time."""
        self.state.counters["bell_requests"] = self._sock.rung
        self.state.counters["bells_lost"] = self._bells.dropped
        if self._decode_s is not None:
            self.state.counters["decode_us"] = round(1e6 * self._decode_s)

    def _on_shutdown(self, identity: bytes, rec: P.Shutdown, payload: list) -> None:
        if not self._peers.may_shut_down(identity, rec.token):
            raise ProtocolError(P.ErrorCode.UNAUTHORIZED, "SHUTDOWN needs the run token")
        self._reply(identity, P.Ack(req=rec.req, version=self.state.version))
        self._running = False

    def _on_control(self, identity: bytes, rec: P.Control, payload: list) -> None:
        try:
            clock, detail, released = self.service.control(rec.op, rec.token, rec.clock, rec.settings, self._clock(),
                                                           owner=rec.owner)
        except ControlError as exc:
            raise ProtocolError(exc.code, exc.reason) from None
        self._reply(identity, P.ControlReply(req=rec.req, clock=clock, detail=detail))
        self._send(released)  # a commit or abort ends a hold

    def emit_stats(self, final: bool = False) -> None:
        self._bell_counters()
        self.events.emit(Event.SERVER_STATS, final=final, busy_s=round(self._busy_s, 6), requests=self._served,
                         **self._cpu.fields(), waits=self.service.waits.totals(), **self.state.stats())


# Request type -> handler. Replies (WELCOME, PARAMS, ...) are not requests
# and get an ERROR. Checked here, at import, to cover every message type.
_HANDLERS: dict[MsgType, Callable[[ShardServer, bytes, P.Record, list], None]] = {
    MsgType.REGISTER: ShardServer._on_register,
    MsgType.PULL: ShardServer._on_pull,
    MsgType.PUSH: ShardServer._on_push,
    MsgType.PUSH_PULL: ShardServer._on_push,
    MsgType.HEARTBEAT: ShardServer._on_heartbeat,
    MsgType.LEAVE: ShardServer._on_leave,
    MsgType.STATS: ShardServer._on_stats,
    MsgType.SHUTDOWN: ShardServer._on_shutdown,
    MsgType.CONTROL: ShardServer._on_control,
}
_REPLY_TYPES = {MsgType.WELCOME, MsgType.PARAMS, MsgType.ACK, MsgType.STATS_REPLY, MsgType.CONTROL_REPLY,
                MsgType.ERROR}
if set(_HANDLERS) | _REPLY_TYPES != set(MsgType):
    raise ImportError(f"shard does not route message types {set(MsgType) - set(_HANDLERS) - _REPLY_TYPES}")
