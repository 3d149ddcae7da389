"""The public worker-side client: pull, push, push_pull and clock against psgd shards.

    client = PSClient(["127.0.0.1:7000", "127.0.0.1:7001"], layout, rank=0)
    params = client.register()          # one flat tensor per shard
    params = client.push_pull(grads)    # grads: one flat float32 tensor per shard

Every call addresses all shards at once and blocks until each has answered
(a pull may be held back by the shard under SSP/BSP). Returned parameter
tensors alias the received frames (no copy): read them before the next call.
Calls are not thread-safe; heartbeats run on a private thread with their own
sockets. Pushes carry (rank, seq); resends reuse the seq, so a shard applies
each push once.
"""
from __future__ import annotations

import time
from typing import Callable, Mapping, Optional, Sequence, Union

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
from psgd.wire.shm.links import ClientSegments, PayloadCache, shared_memory_wanted
from psgd.wire.transport import CurveKeys, ShardConnections
from psgd.workers.grads_request import GradsRequest
from psgd.workers.heartbeats import Heartbeats
from psgd.workers.push_cursor import PushCursor

__all__ = ["PSClient", "GradsRequest", "RemoteError", "RequestFailed", "Interrupted", "REJOINS_PER_SHARD"]

# How often one call joins the same shard again after `not_registered`: a shard
# restarted or timed the worker out (a storm of kills can do both within one call);
# more than this means something keeps dropping the worker, and the call fails.
REJOINS_PER_SHARD = 3
# The decoding buffer of an encoded WELCOME's parameters: apart from the pulls' reply slots (0, 1).
WELCOME_SLOT = -1


class PSClient:
    def __init__(self, addresses: Sequence[str], layout: Layout, rank: int = 0, role: str = "worker",
                 request_timeout_s: float = 30.0, max_retries: int = 5, heartbeat_s: Optional[float] = 1.0,
                 encoding: Union[str, Sequence[str]] = "f32", max_message_bytes: int = -1,
                 should_stop: Optional[Callable[[], bool]] = None, curve: Optional[CurveKeys] = None,
                 topk_ratio: float = 0.01, token: Optional[str] = None, shared_memory: str = "auto",
                 shared_memory_min_bytes: int = SHARED_MEMORY_MIN_BYTES, reply_slots: int = 1,
                 plans: Optional[Sequence[Plan]] = None):
        if len(addresses) != layout.num_shards:
            raise ValueError(f"{len(addresses)} addresses for a layout of {layout.num_shards} shards")
        self.encoder = WireEncoder(encoding, layout.shard_sizes, topk_ratio, plans=plans)  # plans: push_plans' runs
        self.layout = layout
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
        # watch_links: a shard's restart or failover is seen the moment it happens (psgd.wire.link_watch)
        self._conns = ShardConnections(addresses, max_message_bytes, curve=curve, bells=self._shm.bells,
                                       watch_links=True)
        self._rpc = RequestTracker(self._conns, request_timeout_s, max_retries, should_stop)
        self.cursor = PushCursor()    # clock (pushes completed) and the next push's seq
        # Pushes to some shards only (streaming DiLoCo's fragments): each shard's own clock and seq
        self.shard_cursors = [PushCursor() for _ in range(layout.num_shards)]
        self.versions = [0] * layout.num_shards  # shard versions of the parameters last read
        self.min_clocks = [0] * layout.num_shards
        self.fastest_step_s = 0.0  # the fastest worker's time per step, as the shards last reported it
        self.bytes_sent = 0
        self.replies = ReplyDecoder(layout.shard_sizes)  # pulled bytes; encoded replies decoded (and checked)
        self.peak_push_bytes = 0  # the most wire bytes one push (all its shards) carried
        self.pushes = 0  # pushes this client completed (every shard answered); `seq` also counts a predecessor's
        self._params_at: Optional[float] = None  # when the last parameters arrived (step time)
        self.reply_in_slot = [False] * layout.num_shards  # per shard: the last parameters lie in a reply slot
        self._heartbeats = Heartbeats(list(addresses), rank, self._sessions, heartbeat_s, self._curve) \
            if heartbeat_s and role == Role.WORKER else None

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
        return self._params(self._call_all(lambda s, req: P.encode(P.Pull(req=req, rank=self.rank, clock=self.clock))))

    def push(self, grads: Sequence[torch.Tensor], steps: int = 1) -> list[P.Ack]:
        """Send one gradient per shard; returns the shards' acknowledgements.
        `steps`: the training steps behind it (a local-update round's)."""
        replies = self._send_grads(P.Push, grads, steps)
        return [replies[s][0] for s in range(self.layout.num_shards)]

    def push_pull(self, grads: Sequence[torch.Tensor], steps: int = 1) -> list[torch.Tensor]:
        """Push, then read the parameters for the next clock, in one round trip."""
        return self._params(self._send_grads(P.PushPull, grads, steps))

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
        replies = self._call_all(lambda s, req: P.encode(P.Stats(req=req)))
        return [replies[s][0].stats for s in range(self.layout.num_shards)]

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

    def payload_cache(self) -> PayloadCache:
        """A new record of which shards' payloads one request wrote into their
        shared-memory segments (each at most once, even when the request is re-made)."""
        return PayloadCache(self._shm)

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
        return [self.payload_view(s, torch.float32) if e == "f32" else None for s, e in enumerate(self.encoder.encodings)]

    def payload_view(self, s: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
        """A `dtype` view of shard s's shared-memory request region, sized to its
        gradient, to encode a payload straight into; None without a segment."""
        seg = self._shm.segment(s)
        return seg.request_tensor(dtype, self.layout.shard_sizes[s]) if seg is not None else None

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
            out.append(frame_to_tensor(payload[0], "f32", numel) if welcome.encoding == "f32" else
                       self.replies.decode(s, WELCOME_SLOT, welcome.encoding, numel, welcome.scale, payload,
                                           counted=False))
        self._params_at = None  # the first step after joining is not timed (it may wait for the start)
        return out

    def _call_all(self, make: Callable[[int, int], list]) -> dict:
        """Send `make`'s request to every shard and collect the replies. A shard that
        answers `not_registered` (it restarted, or timed this worker out, and forgot
        it) is joined again and the same request repeated (pushes keep their seq, so
        none applies twice), up to REJOINS_PER_SHARD times per shard in one call;
        beyond that its error is raised."""
        shards = range(self.layout.num_shards)
        rejoins = [0] * self.layout.num_shards
        while True:
            try:
                return self._rpc.call({s: make(s, self._rpc.next_id()) for s in shards})
            except RemoteError as exc:
                if exc.code != P.ErrorCode.NOT_REGISTERED or rejoins[exc.shard] >= REJOINS_PER_SHARD:
                    raise
                rejoins[exc.shard] += 1
                self._register_shards([exc.shard])

    def _send_grads(self, kind, grads: Sequence[torch.Tensor], steps: int = 1) -> dict:
        request = self._grads_request(kind, grads, steps)
        return self._finish_grads(request, self._call_all(request.make))

    def _grads_request(self, kind, grads: Sequence[Optional[torch.Tensor]], steps: int = 1,
                       read_versions: Optional[Sequence[int]] = None, ahead: int = 1,
                       slot: int = 0) -> "GradsRequest":
        """Encode one push (a None gradient: that shard's part is encoded later, by
        `add_shard`) and return how to build each shard's request."""
        if len(grads) != self.layout.num_shards:
            raise ValueError(f"expected {self.layout.num_shards} gradient tensors, got {len(grads)}")
        request = GradsRequest(self, kind, self.seq, self.clock, steps, ahead,
                               list(self.versions if read_versions is None else read_versions), slot)
        for s, g in enumerate(grads):
            if g is not None:
                request.add_shard(s, g)
        return request

    def _finish_grads(self, request: "GradsRequest", replies: dict) -> dict:
        if request.shard_cursors is None:
            self.cursor.pushed(request.seq, request.clock)
        else:
            for s, (seq, clock) in request.shard_cursors.items():
                self.shard_cursors[s].pushed(seq, clock)
        self.pushes += 1
        sent = self.encoder.wire_bytes - request.bytes_before
        self.bytes_sent += sent
        self.peak_push_bytes = max(self.peak_push_bytes, sent)
        return replies

    # ---- pushes to some shards (streaming DiLoCo's fragments) --------------------
    def fragment_push_start(self, grads: Mapping[int, torch.Tensor], steps: int = 1) -> "GradsRequest":
        """Send a push+pull to the shards in `grads` only (shard -> its delta) and return at
        once; each shard's seq and clock are its own (`shard_cursors`), so a shard applies
        each of its pushes once whichever others a push leaves out. `fragment_push_finish`
        waits for their parameters. One push in flight at a time."""
        if not grads or any(not 0 <= s < self.layout.num_shards for s in grads):
            raise ValueError(f"a fragment push names shards in 0..{self.layout.num_shards - 1}, got {sorted(grads)}")
        request = GradsRequest(self, P.PushPull, self.seq, self.clock, steps, 1, list(self.versions),
                               shard_cursors={s: (self.shard_cursors[s].seq, self.shard_cursors[s].clock)
                                              for s in grads})
        for s, g in grads.items():
            request.add_shard(s, g)
        request.pending = self._rpc.start({s: request.make(s, self._rpc.next_id()) for s in grads})
        return request

    def fragment_push_finish(self, request: "GradsRequest") -> dict[int, torch.Tensor]:
        """The parameters of the shards a `fragment_push_start` pushed to (shard -> tensor,
        aliasing the received frames), resending or joining a restarted shard again as
        `push_pull_finish` does."""
        shards = sorted(request.shard_cursors or ())
        try:
            replies = self._rpc.wait(request.pending)
        except RemoteError as exc:
            if exc.code != P.ErrorCode.NOT_REGISTERED:
                raise
            self._register_shards([exc.shard])
            replies = self._rpc.call({s: request.make(s, self._rpc.next_id()) for s in shards})  # same seqs
        self._finish_grads(request, replies)
        out = {s: self._param(s, *replies[s]) for s in shards}
        if self.role == Role.WORKER:
            for s in shards:
                self.shard_cursors[s].adopt([replies[s][0].clock])
        self._params_at = time.monotonic()
        return out

    # ---- overlapped pushes (workers.overlap) ------------------------------------
    def push_pull_start(self, grads: Sequence[Optional[torch.Tensor]], steps: int = 1,
                        read_versions: Optional[Sequence[int]] = None, ahead: int = 1,
                        slot: int = 0) -> "GradsRequest":
        """Send a push+pull and return at once; `push_pull_finish` waits for the
        parameters. Shards whose gradient is None here are sent by `push_pull_send`
        (push during backward). `read_versions`: the versions the gradient was
        computed on (a pipelined worker computes on older parameters than the last
        reply); `ahead`: the pull is for clock + ahead; `slot`: the reply slot a same-host
        shard writes the parameters into (with reply_slots=2). One overlapped push at a time."""
        request = self._grads_request(P.PushPull, grads, steps, read_versions, ahead, slot)
        shards = [s for s, g in enumerate(grads) if g is not None]
        request.pending = self._rpc.start({s: request.make(s, self._rpc.next_id()) for s in shards})
        return request

    def push_pull_send(self, request: "GradsRequest", shard: int, grad: torch.Tensor) -> None:
        """Send one more shard's part of a started push (its gradient is complete)."""
        request.add_shard(shard, grad)
        more = self._rpc.start({shard: request.make(shard, self._rpc.next_id())})
        request.pending = more if request.pending is None else request.pending.merged(more)

    def push_pull_piece(self, request: "GradsRequest", shard: int, grad: torch.Tensor, offset: int, numel: int,
                        last: bool) -> None:
        """Send elements [offset, offset + numel) of one shard's gradient (complete there:
        backward has produced them). The shard holds a piece unanswered; `last`: the
        remaining piece, answered once the shard has applied the whole gradient.
        Elementwise encodings only (WireEncoder.elementwise)."""
        wire = self.encoder.encode_piece(shard, grad, offset, numel)
        seg = self._shm.segment(shard)
        # Flattened into the segment's request region: the shard copies the piece from there.
        # The region is published once per push; later pieces land beside pieces being read.
        gen = request.in_shm.generation(shard, grad) if wire.encoding == "f32" and seg and seg.holds(grad) else 0
        frames = request.piece(shard, self._rpc.next_id(), wire, offset, numel, held=not last, shm=gen)
        if not last:
            self._conns.send(shard, frames)  # no reply to wait for: the last piece's answer covers it
            return
        request.whole[shard] = grad  # a repeat after the shard restarted sends it in one message
        more = self._rpc.start({shard: frames})
        request.pending = more if request.pending is None else request.pending.merged(more)

    def push_pull_finish(self, request: "GradsRequest") -> list[torch.Tensor]:
        """The parameters answering a started push (resending, or joining a restarted
        shard again and repeating the push, as a blocking push_pull does)."""
        if request.pending is None or len(request.pending.requests) != self.layout.num_shards:
            raise ValueError("every shard's gradient must be sent before the push can finish")
        try:
            replies = self._rpc.wait(request.pending)
        except RemoteError as exc:
            if exc.code == P.ErrorCode.NOT_REGISTERED:
                self._register_shards([exc.shard])
            elif exc.code != P.ErrorCode.MISSING_PIECES:
                raise
            replies = self._call_all(request.make)  # the same seq: a shard that applied it sees a resend
        return self._params(self._finish_grads(request, replies), ahead=request.ahead, slot=request.slot)

    def _params(self, replies: dict, ahead: int = 1, slot: int = 0) -> list[torch.Tensor]:
        """`ahead`: the pull was for clock + ahead; the worker's own clock is one past its push.
        `slot`: the reply slot the pull named."""
        out = [self._param(s, *replies[s], slot=slot) for s in range(self.layout.num_shards)]
        if self.role == Role.WORKER:
            self.cursor.adopt(replies[s][0].clock - (ahead - 1) for s in replies)
        self._params_at = time.monotonic()
        return out

    def _param(self, s: int, rec, payload: list, slot: int = 0) -> torch.Tensor:
        """Shard s's parameters from its PARAMS reply; notes its version and clocks."""
        if not isinstance(rec, P.Params) or len(payload) != payload_frames(rec):
            raise RemoteError(s, "bad_reply", f"expected PARAMS with its frame, got {rec.TYPE.name}")
        # wire.compression.replies: decoded and checked into the client's own buffer, before anything is noted
        decoded = None if rec.encoding == "f32" else self.replies.decode(
            s, slot, rec.encoding, rec.numel, rec.scale, payload, self._shm_params(s, rec, slot) if rec.shm else None)
        self.versions[s] = rec.version
        self.min_clocks[s] = rec.min_clock
        self.fastest_step_s = rec.fastest_step_s or self.fastest_step_s
        if decoded is not None:
            self.reply_in_slot[s] = False
            return decoded
        self.replies.count("f32", rec.numel)
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
