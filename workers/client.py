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

import threading
import time
from typing import Callable, Optional, Sequence

import torch

from psgd.core.sharding import Layout
from psgd.wire import protocol as P
from psgd.wire.codecs import WireEncoder
from psgd.wire.requests import Interrupted, RemoteError, RequestFailed, RequestTracker
from psgd.wire.shm_links import ClientSegments, PayloadCache, shared_memory_wanted
from psgd.wire.transport import CurveKeys, ShardConnections

__all__ = ["PSClient", "RemoteError", "RequestFailed", "Interrupted", "adopted_clock"]


def adopted_clock(own: int, shard_clocks) -> int:
    """The clock a worker continues from after the shards' replies (see
    PSClient._adopt_clock); the simulator's workers use it too."""
    clocks = list(shard_clocks)
    return max(own, min(clocks)) if clocks else own


class PSClient:
    def __init__(self, addresses: Sequence[str], layout: Layout, rank: int = 0, role: str = "worker",
                 request_timeout_s: float = 30.0, max_retries: int = 5, heartbeat_s: Optional[float] = 1.0,
                 encoding: str = "f32", max_message_bytes: int = -1,
                 should_stop: Optional[Callable[[], bool]] = None, curve: Optional[CurveKeys] = None,
                 topk_ratio: float = 0.01, token: Optional[str] = None, shared_memory: str = "auto"):
        if len(addresses) != layout.num_shards:
            raise ValueError(f"{len(addresses)} addresses for a layout of {layout.num_shards} shards")
        self.encoder = WireEncoder(encoding, layout.shard_sizes, topk_ratio)  # validates encoding
        self.layout = layout
        self.rank = rank
        self.role = role
        self.encoding = encoding
        self._curve = curve  # CurveZMQ keys, also for the heartbeat sockets
        self._token = token or ""  # the run token: re-registering takes the rank over from a dead predecessor
        self._sessions = [""] * layout.num_shards  # per shard, from WELCOME: heartbeats carry it
        self._conns = ShardConnections(addresses, max_message_bytes, curve=curve)
        # Same-host shards: gradients and parameters through shared memory (see psgd.wire.shm).
        self._shm = ClientSegments([4 * n for n in layout.shard_sizes],
                                   shared_memory_wanted(shared_memory, curve is not None))
        self._rpc = RequestTracker(self._conns, request_timeout_s, max_retries, should_stop)
        self.clock = 0                # pushes completed
        self.versions = [0] * layout.num_shards  # shard versions of the parameters last read
        self.min_clocks = [0] * layout.num_shards
        self.seq = 0                  # next push sequence number
        self.bytes_sent = 0
        self._params_at: Optional[float] = None  # when the last parameters arrived (step time)
        self._hb_stop = threading.Event()
        self._hb_thread = None
        if heartbeat_s and role == "worker":
            self._hb_thread = threading.Thread(target=self._heartbeat, args=(list(addresses), heartbeat_s),
                                               name="psgd-heartbeat", daemon=True)

    # ---- public API -------------------------------------------------------
    def register(self) -> list[torch.Tensor]:
        """Join every shard; returns the current parameters (one flat tensor per shard)
        and sets `clock` to where this worker continues (a restarted worker resumes)."""
        out = self._register_shards(range(self.layout.num_shards))
        if self._hb_thread is not None and not self._hb_thread.is_alive():
            self._hb_thread.start()
        return out

    def pull(self) -> list[torch.Tensor]:
        """Current parameters; under SSP/BSP this waits as the consistency mode requires."""
        return self._params(self._call_all(lambda s, req: P.encode(P.Pull(req=req, rank=self.rank, clock=self.clock))))

    def push(self, grads: Sequence[torch.Tensor]) -> list[P.Ack]:
        """Send one gradient per shard; returns the shards' acknowledgements."""
        replies = self._send_grads(P.Push, grads)
        return [replies[s][0] for s in range(self.layout.num_shards)]

    def push_pull(self, grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Push, then read the parameters for the next clock, in one round trip."""
        return self._params(self._send_grads(P.PushPull, grads))

    def leave(self, timeout_s: float = 2.0) -> bool:
        """Tell every shard this worker is done so nobody waits for it. Best effort,
        also while stopping: returns False if a shard did not confirm in time."""
        self._hb_stop.set()
        try:
            self._rpc.call({s: P.encode(P.Leave(req=self._rpc.next_id(), rank=self.rank))
                            for s in range(self.layout.num_shards)},
                           timeout_s=timeout_s, max_retries=0, interruptible=False)
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
                        for s in range(self.layout.num_shards)})

    def close(self) -> None:
        self._hb_stop.set()
        if self._hb_thread is not None and self._hb_thread.is_alive():
            self._hb_thread.join(timeout=2)
        self._conns.close()
        self._shm.close()

    @property
    def shared_memory(self) -> list[bool]:
        """Per shard: whether this connection moves its payloads through shared memory."""
        return [self._shm.segment(s) is not None for s in range(self.layout.num_shards)]

    @property
    def resends(self) -> int:
        return self._rpc.resends

    # ---- internals --------------------------------------------------------
    def _register_shards(self, shards) -> list[torch.Tensor]:
        fp = self.layout.fingerprint
        replies = self._rpc.call({s: P.encode(P.Register(req=self._rpc.next_id(), rank=self.rank, role=self.role,
                                                          fingerprint=fp, token=self._token, **self._shm.offer(s)))
                                  for s in shards})
        for s, (welcome, _) in replies.items():
            self._shm.settle(s, welcome.shm)
        out = []
        self._adopt_clock(welcome.clock for welcome, _ in replies.values())
        for s in sorted(replies):
            welcome, payload = replies[s]
            self.seq = max(self.seq, welcome.last_seq + 1)
            self._sessions[s] = welcome.session
            self.versions[s] = welcome.version
            out.append(P.frame_to_tensor(payload[0], "f32", self.layout.shard_sizes[s]))
        self._params_at = None  # the first step after joining is not timed (it may wait for the start)
        return out

    def _call_all(self, make: Callable[[int, int], list]) -> dict:
        shards = range(self.layout.num_shards)
        for _ in shards:
            try:
                return self._rpc.call({s: make(s, self._rpc.next_id()) for s in shards})
            except RemoteError as exc:
                if exc.code != "not_registered":
                    raise
                # The shard restarted or timed us out and forgot us: join again, then
                # repeat the same request (pushes keep their seq, so none applies twice).
                self._register_shards([exc.shard])
        return self._rpc.call({s: make(s, self._rpc.next_id()) for s in shards})

    def _send_grads(self, kind, grads: Sequence[torch.Tensor]) -> dict:
        if len(grads) != self.layout.num_shards:
            raise ValueError(f"expected {self.layout.num_shards} gradient tensors, got {len(grads)}")
        for s, g in enumerate(grads):
            if g.numel() != self.layout.shard_sizes[s] or g.dtype != torch.float32:
                raise ValueError(f"shard {s} gradient must be float32 with {self.layout.shard_sizes[s]} elements")
        before = self.encoder.wire_bytes
        wire = [self.encoder.encode(s, g) for s, g in enumerate(grads)]
        seq, clock = self.seq, self.clock
        in_shm = PayloadCache(self._shm)  # dense payloads go to a same-host shard's segment, once per request
        # The step time (work since the parameters arrived, never the wait for
        # them) feeds the shards' adaptive staleness bound.
        step_s = time.monotonic() - self._params_at if self._params_at is not None else 0.0

        def make(s: int, req: int) -> list:
            gen = in_shm.generation(s, wire[s].frames[0]) if wire[s].nnz == 0 and wire[s].encoding != "topk" else 0
            return P.encode(kind(req=req, rank=self.rank, seq=seq, clock=clock, read_version=self.versions[s],
                                 encoding=wire[s].encoding, scale=wire[s].scale, numel=self.layout.shard_sizes[s],
                                 nnz=wire[s].nnz, shm=gen, step_s=step_s), () if gen else wire[s].frames)
        replies = self._call_all(make)
        # max, not += 1: a re-registration during the call may already have moved them on.
        self.seq = max(self.seq, seq + 1)
        self.clock = max(self.clock, clock + 1)
        self.bytes_sent += self.encoder.wire_bytes - before
        return replies

    def _params(self, replies: dict) -> list[torch.Tensor]:
        out = []
        for s in range(self.layout.num_shards):
            rec, payload = replies[s]
            if not isinstance(rec, P.Params) or len(payload) != P.payload_frames(rec):
                raise RemoteError(s, "bad_reply", f"expected PARAMS with its frame, got {rec.TYPE.name}")
            self.versions[s] = rec.version
            self.min_clocks[s] = rec.min_clock
            out.append(self._shm_params(s, rec) if rec.shm else P.frame_to_tensor(payload[0], rec.encoding, rec.numel))
        if self.role == "worker":
            self._adopt_clock(replies[s][0].clock for s in replies)
        self._params_at = time.monotonic()
        return out

    def _shm_params(self, s: int, rec: P.Params) -> torch.Tensor:
        """The parameters a same-host shard wrote into the segment for this request."""
        seg = self._shm.segment(s)
        dtype = P.ENCODINGS.get(rec.encoding, (None,))[0]
        out = seg.reply_tensor(rec.req, dtype, rec.numel) if seg is not None and dtype is not None else None
        if out is None or rec.numel != self.layout.shard_sizes[s]:
            raise RemoteError(s, "bad_reply", "PARAMS names a shared-memory reply this client cannot read")
        return out

    def _adopt_clock(self, shard_clocks) -> None:
        """Continue from the clock the shards assign (a rejoin, or a BSP straggler
        moved on). The lowest shard's view wins: pushing a clock one shard has
        already applied is dropped there as late, whereas a clock ahead of a
        BSP shard's step would be refused."""
        self.clock = adopted_clock(self.clock, shard_clocks)

    def _heartbeat(self, addresses: list[str], period: float) -> None:
        conns = ShardConnections(addresses, curve=self._curve)
        try:
            while not self._hb_stop.wait(period):
                conns.recv(0)  # refusals (a session from before a shard restart) must not pile up
                for s in range(len(addresses)):
                    conns.send(s, P.encode(P.Heartbeat(rank=self.rank, session=self._sessions[s])))
        finally:
            conns.close()
