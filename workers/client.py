"""The public worker-side client: pull, push, push_pull and clock against psgd shards.

    client = PSClient(["127.0.0.1:7000", "127.0.0.1:7001"], layout, rank=0)
    params = client.register()          # one flat tensor per shard
    params = client.push_pull(grads)    # grads: one flat float32 tensor per shard

One primitive underneath (ps-lite's push/pull -> timestamp, then Wait): `start` sends a
request (a pull, a push, a push sent shard by shard or in pieces through `send`, a
fragment push to some shards) and returns its handle at once; `wait` collects the replies.
The blocking calls are `wait(start(...))`; they address all shards at once and block
until each has answered (a pull may be held back by the shard under SSP/BSP). Returned parameter
tensors alias the received frames (no copy): read them before the next call.
Calls are not thread-safe; heartbeats run on a private thread with their own
sockets. Pushes carry (rank, seq); resends reuse the seq, so a shard applies
each push once.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence, Union

import torch

from psgd.config.modes import Role
from psgd.config.operations import SHARED_MEMORY_MIN_BYTES
from psgd.core.sharding import Layout
from psgd.wire import protocol as P
from psgd.wire.codecs import WireEncoder, dense_codec
from psgd.wire.codecs.runs import Plan, plan_fingerprint
from psgd.wire.payload import frame_to_tensor, payload_frames
from psgd.wire.replies import ReplyDecoder
from psgd.wire.requests import Interrupted, RemoteError, RequestFailed, RequestTracker
from psgd.wire.shm.links import ClientSegments, shared_memory_wanted
from psgd.wire.transport import CurveKeys, ShardConnections
from psgd.workers.heartbeats import Heartbeats
from psgd.workers.push_cursor import PushCursor
from psgd.workers.request import PushEncoding, Request

__all__ = ["PSClient", "Request", "RemoteError", "RequestFailed", "Interrupted", "REJOINS_PER_SHARD"]

# How often one call joins the same shard again after `not_registered`: a shard
# restarted or timed the worker out (a storm of kills can do both within one call);
# more than this means something keeps dropping the worker, and the call fails.
REJOINS_PER_SHARD = 3
# The decoding buffer of an encoded WELCOME's parameters: apart from the pulls' reply slots (0, 1).
WELCOME_SLOT = -1


class PSClient:
    def __init__(self, addresses: Sequence[str], layout: Layout, rank: int = 0, role: str = "worker",
                 request_timeout_s: float = 30.0, max_retries: int = 5, heartbeat_s: Optional[float] = 1.0,
                 encoding: Union[str, Sequence[str]] = "none", max_message_bytes: int = -1,
                 should_stop: Optional[Callable[[], bool]] = None, curve: Optional[CurveKeys] = None,
                 topk_ratio: float = 0.01, token: Optional[str] = None, shared_memory: str = "auto",
                 shared_memory_min_bytes: int = SHARED_MEMORY_MIN_BYTES, reply_slots: int = 1,
                 plans: Optional[Sequence[Plan]] = None):
        if len(addresses) != layout.num_shards:
            raise ValueError(f"{len(addresses)} addresses for a layout of {layout.num_shards} shards")
        self.encoder = WireEncoder(encoding, layout.shard_sizes, topk_ratio, plans=plans)  # plans: push_plans' runs
        self.layout = layout
        self._shards = tuple(range(layout.num_shards))  # every shard: the shards of a whole request
        self.rank = rank
        self.role = role
        self._curve = curve  # CurveZMQ keys, also for the heartbeat sockets
        self._token = token or ""  # the run token: re-registering takes the rank over from a dead predecessor
        self._sessions = [""] * layout.num_shards  # per shard, from WELCOME: heartbeats carry it
        # Same-host shards: gradients and parameters through shared memory (see psgd.wire.shm.segment),
        # for shards whose tensor is large enough for it to win (psgd.wire.shm.links.worth_sharing).
        # reply_slots=2 (a pipelined worker): each shard's replies alternate between two slots of the
        # segment, so the model can train on one reply while the next lands (see `reply_in_slot`).
        self._shm = ClientSegments([4 * n for n in layout.shard_sizes],
                                   shared_memory_wanted(shared_memory, curve is not None), shared_memory_min_bytes,
                                   reply_slots)
        # watch_links: a shard's restart or failover is seen the moment it happens (psgd.wire.transport.link_watch)
        self._conns = ShardConnections(addresses, max_message_bytes, curve=curve, bells=self._shm.bells,
                                       watch_links=True)
        self._rpc = RequestTracker(self._conns, request_timeout_s, max_retries, should_stop)
        self.cursor = PushCursor()    # clock (pushes completed) and the next push's seq
        # Pushes to some shards only (streaming DiLoCo's fragments): each shard's own clock and seq
        self.shard_cursors = [PushCursor() for _ in range(layout.num_shards)]
        self.versions = [0] * layout.num_shards  # shard versions of the parameters last read
        self.min_clocks = [0] * layout.num_shards
        self.fastest_step_s = 0.0  # the fastest worker's time per step, as the shards last reported it
        # Seconds its pulls stayed parked (a barrier, a bound), summed over pulls; a pull waits for every
        # shard, so each counts the shard that held it longest.
        self.pull_wait_s = 0.0
        self.bytes_sent = 0
        self.replies = ReplyDecoder(layout.shard_sizes)  # pulled bytes; encoded replies decoded (and checked)
        self.peak_push_bytes = 0  # the most wire bytes one push (all its shards) carried
        self.pushes = 0  # pushes this client completed (every shard answered); `seq` also counts a predecessor's
        self._params_at: Optional[float] = None  # when the last parameters arrived (step time)
        self.reply_in_slot = [False] * layout.num_shards  # per shard: the last parameters lie in a reply slot
        self._encoding = PushEncoding(rank, self.encoder, layout.shard_sizes, self._shm)
        heartbeats = heartbeat_s and role == Role.WORKER
        self._heartbeats = Heartbeats(list(addresses), rank, self._sessions, heartbeat_s, curve) if heartbeats else None

    # ---- public API -------------------------------------------------------
    @property
    def clock(self) -> int:
        """Pushes completed, as the shards count them."""
        return self.cursor.clock

    @clock.setter
    def clock(self, value: int) -> None:
        """Set by hand only to resend a push (a retry after a lost reply) or in tests."""
        self.cursor.clock = value

    @property
    def seq(self) -> int:
        """The next push's sequence number."""
        return self.cursor.seq

    @seq.setter
    def seq(self, value: int) -> None:
        self.cursor.seq = value

    def register(self) -> list[torch.Tensor]:
        """Join every shard; returns the current parameters (one flat tensor per shard)
        and sets `clock` to where this worker continues (a restarted worker resumes)."""
        out = self._register_shards(range(self.layout.num_shards))
        if self._heartbeats is not None:
            self._heartbeats.start()
        return out

    def pull(self) -> list[torch.Tensor]:
        """Current parameters; under SSP/BSP this waits as the consistency mode requires."""
        return self._in_order(self.wait(self.start()))

    def push(self, grads: Sequence[torch.Tensor], steps: int = 1) -> list[P.Ack]:
        """Send one gradient per shard; returns the shards' acknowledgements.
        `steps`: the training steps behind it (a local-update round's)."""
        return self._in_order(self.wait(self.start(grads, pull=False, steps=steps)))

    def push_pull(self, grads: Sequence[torch.Tensor], steps: int = 1) -> list[torch.Tensor]:
        """Push, then read the parameters for the next clock, in one round trip."""
        return self._in_order(self.wait(self.start(grads, steps=steps)))

    # ---- the request primitive ----------------------------------------------
    def start(self, grads: Union[None, Sequence[Optional[torch.Tensor]], Mapping[int, torch.Tensor]] = None, *,
              pull: bool = True, steps: int = 1, read_versions: Optional[Sequence[int]] = None, ahead: int = 1,
              slot: int = 0) -> Request:
        """Send a request and return its handle at once; `wait` collects the answer.
        `grads`: None, a pull; one gradient per shard, a push (with a pull unless `pull` is
        False), a None gradient's shard sent later by `send`; a mapping shard -> gradient, a
        push+pull to those shards only, each with its own seq and clock (`shard_cursors`), so
        a shard applies each of its pushes once whichever others a push leaves out.
        `read_versions`: the versions the gradient was computed on (a pipelined worker
        computes on older parameters than the last reply); `ahead`: the pull is for
        clock + ahead; `slot`: the reply slot a same-host shard writes the parameters into
        (with reply_slots=2). One request in flight at a time."""
        shards = self._shards
        if grads is None:
            return self._send_first(Request(P.Pull, shards, self._encoding, clock=self.cursor.clock), shards)
        # A list or tuple is never a mapping: the abc check (several calls) only for other types.
        fragment = type(grads) is not list and type(grads) is not tuple and isinstance(grads, Mapping)
        if fragment and (not grads or any(s not in shards for s in grads)):
            raise ValueError(f"a fragment push names shards in 0..{self.layout.num_shards - 1}, got {sorted(grads)}")
        if not fragment and len(grads) != self.layout.num_shards:
            raise ValueError(f"expected {self.layout.num_shards} gradient tensors, got {len(grads)}")
        given = dict(grads) if fragment else {s: g for s, g in enumerate(grads) if g is not None}
        cursors = {s: (self.shard_cursors[s].seq, self.shard_cursors[s].clock) for s in given} if fragment else None
        params_at = self._params_at  # step_s(), inline: one call fewer per request
        request = Request(P.PushPull if pull or fragment else P.Push, tuple(sorted(given)) if fragment else shards,
                          self._encoding, self.cursor.seq, self.cursor.clock, steps, ahead,
                          list(self.versions if read_versions is None else read_versions), slot,
                          time.monotonic() - params_at if params_at is not None else 0.0, cursors)
        for s, g in given.items():
            request.add_shard(s, g)
        return self._send_first(request, given)

    def send(self, request: Request, shard: int, grad: torch.Tensor, piece: Optional[tuple[int, int]] = None,
             last: bool = True) -> None:
        """Send one more shard's part of a started push: its whole gradient, or with
        `piece` = (offset, numel) elements [offset, offset + numel) of it (complete there:
        backward has produced them; elementwise encodings only, WireEncoder.elementwise).
        The shard holds a piece unanswered; `last`: the remaining piece, answered once the
        shard has applied the whole gradient."""
        if piece is None:
            request.add_shard(shard, grad)
            frames = request.make(shard, self._rpc.next_id())
        else:
            frames = request.piece(shard, self._rpc.next_id(), grad, *piece, last=last)
            if not last:
                self._conns.send(shard, frames)  # no reply to wait for: the last piece's answer covers it
                return
        more = self._rpc.start({shard: frames})
        request.pending = more if request.pending is None else request.pending.merged(more)

    def wait(self, request: Request) -> dict[int, Any]:
        """Block until every shard the request addresses has answered; returns shard ->
        its parameters (a request with a pull: tensors aliasing the received frames) or
        its reply record (an ACK, a STATS_REPLY). A shard that answers `not_registered`
        (it restarted, or timed this worker out) is joined again, up to REJOINS_PER_SHARD
        times in one request, and the request repeated: a push keeps its seq, so none
        applies twice, and a push sent in pieces goes whole."""
        if request.pending is None or request.pending.requests.keys() != set(request.shards):
            raise ValueError("every shard's gradient must be sent before the push can finish")
        rejoins: dict[int, int] = {}
        while True:
            try:
                replies = self._rpc.wait(request.pending)
                break
            except RemoteError as exc:
                if exc.code == P.ErrorCode.NOT_REGISTERED and rejoins.get(exc.shard, 0) < REJOINS_PER_SHARD:
                    rejoins[exc.shard] = rejoins.get(exc.shard, 0) + 1
                    self._register_shards([exc.shard])
                elif exc.code != P.ErrorCode.MISSING_PIECES or not request.whole:
                    raise
                if request.kind is P.Pull:
                    request.clock = self.clock  # where a rejoin says this worker is
                request.pending = self._rpc.start({s: request.make(s, self._rpc.next_id()) for s in request.shards})
        request.pending = None
        return self._settle(request, replies)

    def leave(self, timeout_s: float = 2.0) -> bool:
        """Tell every shard this worker is done so nobody waits for it. Best effort,
        also while stopping: returns False if a shard did not confirm in time."""
        if self._heartbeats is not None:
            self._heartbeats.stop()
        try:
            self._rpc.call({s: P.encode(P.Leave(req=self._rpc.next_id(), rank=self.rank))
                            for s in range(self.layout.num_shards)},
                           timeout_s=timeout_s, max_retries=0, interruptible=False, patient=False)
            return True
        except (RequestFailed, RemoteError):
            return False

    def stats(self) -> list[dict]:
        shards = range(self.layout.num_shards)
        request = self._send_first(Request(P.Stats, tuple(shards), self._encoding), shards)
        return [reply.stats for reply in self._in_order(self.wait(request))]

    def shutdown_servers(self, token: Optional[str] = None) -> None:
        """Stop every shard. Shards take this only with the run token (`token`, else
        the client's own), or, when started without one, from a registered worker;
        no re-register-and-retry here, since a shard that has already stopped would
        never answer the repeat."""
        tok = token if token is not None else self._token
        self._rpc.call({s: P.encode(P.Shutdown(req=self._rpc.next_id(), token=tok))
                        for s in range(self.layout.num_shards)}, patient=False)

    def close(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.stop(join_s=2)
        self._conns.close()
        self._shm.close()
        self.encoder.forget()  # its last payload may view a segment

    @property
    def shared_memory(self) -> list[bool]:
        """Per shard: whether this connection moves its payloads through shared memory."""
        return [self._shm.segment(s) is not None for s in range(self.layout.num_shards)]

    @property
    def reply_slots(self) -> int:
        """How many reply slots each shared-memory segment holds (2: a pipelined worker's)."""
        return self._shm.reply_slots

    @property
    def doorbells(self) -> list[bool]:
        """Per shard: whether this connection's header-only messages ring a doorbell
        (psgd.wire.shm.doorbell) instead of going through ZeroMQ."""
        return [self._shm.bells.get(s) is not None for s in range(self.layout.num_shards)]

    def step_s(self) -> float:
        """Seconds since the last parameters arrived (0 before the first timed step):
        a step's work, never the wait for its parameters, which feeds the shards'
        adaptive staleness bound."""
        return time.monotonic() - self._params_at if self._params_at is not None else 0.0

    def gradient_buffers(self) -> list[Optional[torch.Tensor]]:
        """Per shard, where to put the next gradient so that sending it copies
        nothing: a float32 view of the shared-memory request region (fp32 encoding,
        same-host shard), else None. Write it only between calls (no push of this
        client in flight); the views change when a shard is joined again."""
        # Other encodings: the encoder reads the fp32 gradient and writes the payload there.
        return [self._encoding.payload_view(s, torch.float32) if e == "none" else None
                for s, e in enumerate(self.encoder.encodings)]

    @property
    def resends(self) -> int:
        return self._rpc.resends

    @property
    def failovers(self) -> int:
        """Requests resent the moment their shard's connection came back (not at the timeout)."""
        return self._rpc.failovers

    # ---- internals --------------------------------------------------------
    def _register_shards(self, shards) -> list[torch.Tensor]:
        fp = [plan_fingerprint(self.layout.fingerprint, plan) for plan in self.encoder.plans]  # runs refused if not alike
        replies = self._rpc.call({s: P.encode(P.Register(req=self._rpc.next_id(), rank=self.rank, role=self.role,
                                                          fingerprint=fp[s], token=self._token, **self._shm.offer(s)))
                                  for s in shards})
        for s, (welcome, _) in replies.items():
            self._shm.settle(s, welcome.shm, welcome.bell)
        out = []
        self.cursor.adopt(welcome.clock for welcome, _ in replies.values())
        for s in sorted(replies):
            welcome, payload = replies[s]
            self.cursor.joined(welcome.last_seq)
            self.shard_cursors[s].adopt([welcome.clock])
            self.shard_cursors[s].joined(welcome.last_seq)
            self._sessions[s] = welcome.session
            self.versions[s] = welcome.version
            numel = self.layout.shard_sizes[s]  # a worker's parameters come in the reply encoding from the start
            out.append(frame_to_tensor(payload[0], "none", numel) if welcome.encoding == "none" else
                       self.replies.decode(s, WELCOME_SLOT, welcome.encoding, numel, welcome.scale, payload,
                                           counted=False))
        self._params_at = None  # the first step after joining is not timed (it may wait for the start)
        return out

    def _send_first(self, request: Request, shards) -> Request:
        """Send the shards' messages that are ready now (the rest follow by `send`)."""
        request.pending = self._rpc.start({s: request.make(s, self._rpc.next_id()) for s in shards})
        return request

    def _settle(self, request: Request, replies: dict) -> dict[int, Any]:
        """Note what the answered request moved: the push cursors and bytes, the clocks adopted."""
        if request.pushes:
            if request.shard_cursors is None:
                self.cursor.pushed(request.seq, request.clock)
            else:
                for s, (seq, clock) in request.shard_cursors.items():
                    self.shard_cursors[s].pushed(seq, clock)
            self.pushes += 1
            sent = self.encoder.wire_bytes - request.bytes_before
            self.bytes_sent += sent
            if sent > self.peak_push_bytes:
                self.peak_push_bytes = sent
        if not request.pulls:
            return {s: replies[s][0] for s in request.shards}
        # One pass over the shards: each reply checked and read, the longest hold and the lowest clock noted.
        out, held, lowest = {}, None, None
        for s in request.shards:
            rec, payload = replies[s]
            out[s] = self._param(s, rec, payload, request.slot)
            if held is None or rec.held_s > held:
                held = rec.held_s
            if lowest is None or rec.clock < lowest:
                lowest = rec.clock
        if self.role == Role.WORKER:
            self.pull_wait_s += held
            if request.shard_cursors is not None:
                for s in request.shards:
                    self.shard_cursors[s].adopt((replies[s][0].clock,))
            else:  # the pull was for clock + ahead; the worker's own clock is one past its push
                self.cursor.adopt((lowest - (request.ahead - 1),))
        self._params_at = time.monotonic()
        return out

    def _in_order(self, answers: dict[int, Any]) -> list:
        return [answers[s] for s in self._shards]

    def _param(self, s: int, rec, payload: list, slot: int = 0) -> torch.Tensor:
        """Shard s's parameters from its PARAMS reply; notes its version and clocks."""
        if not isinstance(rec, P.Params) or len(payload) != payload_frames(rec):
            raise RemoteError(s, "bad_reply", f"expected PARAMS with its frame, got {rec.TYPE.name}")
        # wire.compression.replies: decoded and checked into the client's own buffer, before anything is noted
        decoded = None if rec.encoding == "none" else self.replies.decode(
            s, slot, rec.encoding, rec.numel, rec.scale, payload, self._shm_params(s, rec, slot) if rec.shm else None)
        self.versions[s] = rec.version
        self.min_clocks[s] = rec.min_clock
        self.fastest_step_s = rec.fastest_step_s or self.fastest_step_s
        if decoded is not None:
            self.reply_in_slot[s] = False
            return decoded
        self.replies.count("none", rec.numel)
        self.reply_in_slot[s] = rec.shm
        return self._shm_params(s, rec, slot) if rec.shm else frame_to_tensor(payload[0], rec.encoding, rec.numel)

    def _shm_params(self, s: int, rec: P.Params, slot: int = 0) -> torch.Tensor:
        """The parameters a same-host shard wrote into the segment for this request."""
        seg = self._shm.segment(s)
        codec = dense_codec(rec.encoding)
        dtype = codec.wire_dtype if codec is not None else None
        out = seg.reply_tensor(rec.req, dtype, rec.numel, slot) if seg is not None and dtype is not None else None
        if out is None or rec.numel != self.layout.shard_sizes[s]:
            raise RemoteError(s, "bad_reply", "PARAMS names a shared-memory reply this client cannot read")
        return out
