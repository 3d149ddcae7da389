"""The sockets: a shard's bound ROUTER socket (ServerSocket) and a client's DEALER socket
per shard (ShardConnections), so a client sends to every shard before waiting for any
reply. Frames are sent with copy=False (pyzmq copies frames below its copy threshold
itself, which is cheaper for small headers) and received as zero-copy memoryviews.
Sockets are not thread-safe: use each from one thread.
"""
from __future__ import annotations

import select
import time
from collections import deque
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

import zmq

from psgd.wire.shm.doorbell import Bells, PolledBells, ring
from psgd.wire.transport.context import TransportError, tcp_address, zmq_context
from psgd.wire.transport.curve import CurveKeys, authenticate_clients
from psgd.wire.transport.link_watch import LinkWatch

__all__ = ["PEER_SEND_HWM", "RECONNECT_MAX_MS", "SendTracker", "ServerSocket", "ShardConnections", "loopback_pipe"]

RECONNECT_MAX_MS = 250

# Frames below this size are copied when sent instead of tracked (pyzmq copies
# below its own copy threshold, 64 KiB, even when asked not to).
TRACK_MIN_BYTES = 1 << 16

# A server's replies up to this size are copied into the message rather than
# sent zero-copy and tracked. pyzmq reports a tracked frame's release through
# a Python thread woken per frame; on the 2-core bench machine that cost the
# shard about 50 us of CPU per reply, more than copying 1 MB, and at 10 MB the
# copy was no slower end to end.
REPLY_COPY_MAX_BYTES = 16 << 20

# Per-peer queue bounds of a server socket, in messages. A worker has one
# request per shard in flight (heartbeats use their own socket), so only a
# client that does not read its replies reaches these.
PEER_SEND_HWM = 8
PEER_RECV_HWM = 64

# The most messages a server takes per wake-up (ServerSocket.recv_batch): enough that a shard
# serving many workers polls once per burst, few enough that its housekeeping still runs often.
RECV_BATCH_MAX = 64
# ... and stops taking the socket's messages past this many bytes: a batch of large inline pushes
# holds at most about this much beyond what the peers' queues (PEER_RECV_HWM) already bound.
RECV_BATCH_MAX_BYTES = 16 << 20
_POLLIN = int(zmq.POLLIN)  # a plain int: `&` on pyzmq's flag enum runs Python code, on every wake-up


class ServerSocket:
    """A bound ROUTER socket. `recv` returns (identity, frames) or None on timeout."""

    def __init__(self, address: str, max_message_bytes: int = -1, curve: Optional[CurveKeys] = None,
                 copy_max_bytes: int = REPLY_COPY_MAX_BYTES, bells: Optional[Bells] = None):
        self.bells = bells  # same-host clients' doorbells (psgd.wire.shm.doorbell), by identity
        self._rung: deque = deque()  # messages read from bells, not yet returned
        self.rung = 0                # messages received through bells
        self.copy_max_bytes = copy_max_bytes  # send_tracked copies frames up to this size
        self._sock = zmq_context().socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            authenticate_clients(curve.authorized_dir)
            self._sock.curve_secretkey = curve.secret
            self._sock.curve_publickey = curve.public
            self._sock.curve_server = True
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        # Memory per peer is bounded: at most PEER_SEND_HWM replies queue for one
        # client (ROUTER_MANDATORY reports a full queue instead of blocking). A
        # client that lets them pile up is cut off (and counted by the caller):
        # further replies to it are dropped until it reads again. A real client that missed
        # one (a burst of its own resends) resends after its timeout.
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.SNDHWM, PEER_SEND_HWM)
        self._sock.setsockopt(zmq.RCVHWM, PEER_RECV_HWM)
        self._curve = curve is not None
        self.cut_off: set[bytes] = set()    # peers whose reply queue is full right now
        self.on_cut_off: Callable[[bytes], None] = lambda identity: None
        self.peer_key: Optional[str] = None  # Curve public key (Z85) of the last message's sender
        try:
            self._sock.bind(tcp_address(address))
        except zmq.ZMQError as exc:
            self._sock.close(0)
            raise TransportError(f"cannot bind {address}: {exc}") from None
        self.address = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        # One epoll set over the socket's notification descriptor and the bells: a wait costs the same
        # with 1 bell or 128 (zmq.Poller hands every registered item to the kernel on each call).
        self._epoll = select.epoll()
        self._sock_fd = self._sock.get(zmq.FD)
        self._epoll.register(self._sock_fd, select.EPOLLIN)
        self._polled = PolledBells(self._epoll, bells, select.EPOLLIN) if bells is not None else None

    def recv(self, timeout_ms: int) -> Optional[tuple[bytes, list]]:
        """The next message as (identity, frames), or None on timeout."""
        got = self.recv_batch(timeout_ms, limit=1)
        return got[0] if got else None

    def recv_batch(self, timeout_ms: int, limit: int = RECV_BATCH_MAX) -> list[tuple[bytes, list]]:
        """Every message queued once one is (waiting up to `timeout_ms` for the first), at most
        `limit`, as (identity, frames) in the order read; [] on timeout. One poll covers the
        socket and the bells; what is left over is returned first by the next call. Under
        CurveZMQ one message per call: `peer_key` is the sender of the last one returned."""
        limit = 1 if self._curve else limit
        out: list = []
        while self._rung and len(out) < limit:
            out.append(self._rung.popleft())
        if len(out) == limit:
            return out
        ready = self._wait(0 if out else timeout_ms)
        while self._rung and len(out) < limit:
            out.append(self._rung.popleft())
        taken = 0  # bytes of the socket's messages taken: what ZeroMQ no longer holds back from the peers
        while ready and len(out) < limit and taken < RECV_BATCH_MAX_BYTES:
            try:
                parts = self._sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if self._curve:
                self.peer_key = parts[0].get("User-Id")  # set by the ZAP handler: the client's public key
            taken += sum(map(len, parts))
            out.append((parts[0].bytes, [p.buffer for p in parts[1:]]))
        return out

    def _wait(self, timeout_ms: int) -> bool:
        """Wait up to `timeout_ms` for the socket or a bell; the bells' messages go to `_rung`.
        True when the socket has a message. ZeroMQ's descriptor signals a change, not a level
        (and wakes for its own commands too): the socket's own flags are read before sleeping
        (a message already queued means no sleep) and after each wake-up."""
        if self._polled is not None:
            self._polled.sync()  # never poll a dropped bell's descriptor
        deadline = time.monotonic() + timeout_ms / 1e3
        while True:
            ready = bool(int(self._sock.get(zmq.EVENTS)) & _POLLIN)
            events = self._epoll.poll(0.0 if ready or self._rung else max(0.0, deadline - time.monotonic()))
            if events and self._polled is not None:
                before = len(self._rung)
                for fd, _ in events:
                    if fd != self._sock_fd:
                        self._polled.take(fd, self._rung)
                self.rung += len(self._rung) - before
            if ready or self._rung or not events:
                return ready
            if int(self._sock.get(zmq.EVENTS)) & _POLLIN:
                return True
            if time.monotonic() >= deadline:  # else woken by ZeroMQ's own commands only: wait out the rest
                return False

    def send(self, identity: bytes, frames: Sequence) -> bool:
        """Send a reply without blocking; returns False if the peer is gone or
        its reply queue is full (the reply is dropped and counted). A header-only
        reply to a client with a doorbell rings it instead."""
        if ring(self.bells, identity, frames):
            return True
        try:
            self._sock.send(identity, zmq.SNDMORE | zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            return self._unsent(identity, exc)
        self._sock.send_multipart(list(frames), copy=False)  # the rest of a started message never blocks
        self.cut_off.discard(identity)
        return True

    def _unsent(self, identity: bytes, exc: zmq.ZMQError) -> bool:
        if exc.errno == zmq.EAGAIN:  # its queue is at the high-water mark
            if identity not in self.cut_off:
                self.cut_off.add(identity)
                self.on_cut_off(identity)
            return False
        if exc.errno == zmq.EHOSTUNREACH:
            return False
        raise exc

    def send_tracked(self, identity: bytes, frames: Sequence) -> Optional["SendTracker"]:
        """Send a reply whose buffers the caller will modify later; returns a
        tracker that reports when ZeroMQ no longer reads them, or None if no
        buffer needs watching (all were copied, or the peer is gone)."""
        # Frames up to copy_max_bytes are copied (cheaper than tracking, see
        # REPLY_COPY_MAX_BYTES); only larger ones alias memory the caller will change.
        try:
            self._sock.send(identity, zmq.SNDMORE | zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            self._unsent(identity, exc)
            return None
        self.cut_off.discard(identity)
        try:
            trackers = []
            last = len(frames) - 1
            for i, frame in enumerate(frames):
                flags = zmq.SNDMORE if i < last else 0
                nbytes = memoryview(frame).nbytes
                if nbytes < TRACK_MIN_BYTES or nbytes <= self.copy_max_bytes:
                    self._sock.send(frame, flags)
                else:
                    trackers.append(self._sock.send(frame, flags, copy=False, track=True))
            return SendTracker(zmq.MessageTracker(*trackers)) if trackers else None
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return None
            raise

    def close(self) -> None:
        self._epoll.close()
        self._sock.close(0)
        if self.bells is not None:
            self.bells.close()


class SendTracker:
    """Whether ZeroMQ has released the buffers of a zero-copy send."""

    def __init__(self, tracker: "zmq.MessageTracker"):
        self._tracker = tracker

    @property
    def done(self) -> bool:
        return self._tracker.done

    def wait(self, timeout_s: float) -> bool:
        """Block up to `timeout_s`; True once the buffers are released."""
        try:
            self._tracker.wait(timeout_s)
            return True
        except zmq.NotDone:
            return False


class ShardConnections:
    """One DEALER socket per shard address."""

    def __init__(self, addresses: Sequence[str], max_message_bytes: int = -1, curve: Optional[CurveKeys] = None,
                 bells: Optional[Bells] = None, watch_links: bool = False):
        """`watch_links`: follow each connection's drops and reconnections (`links`,
        psgd.wire.transport.link_watch), so requests can be resent the moment a shard is back."""
        self.addresses = list(addresses)
        self.bells = bells  # doorbells of same-host shards (psgd.wire.shm.doorbell), by shard index
        self._socks = []
        self._poller = zmq.Poller()
        for addr in self.addresses:
            sock = zmq_context().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            # A shard that died is tried again every 100 ms, at most 250 ms apart however long it is
            # down: a restarted or promoted shard is reached (and resent to) within 250 ms of its return.
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
            if curve is not None:
                sock.curve_secretkey = curve.secret
                sock.curve_publickey = curve.public
                sock.curve_serverkey = curve.server_public
            sock.connect(tcp_address(addr))
            self._poller.register(sock, zmq.POLLIN)
            self._socks.append(sock)
        self._index = {s: i for i, s in enumerate(self._socks)}
        self.links = LinkWatch(self._socks, self._poller) if watch_links else None
        self._polled = PolledBells(self._poller, bells, zmq.POLLIN) if bells is not None else None
        self._messages: dict[tuple[int, int], tuple] = {}  # (shard, frame position) -> (buffer, zmq.Frame)

    def __len__(self) -> int:
        return len(self._socks)

    def send(self, shard: int, frames: Sequence) -> bool:
        """Queue a request; returns False if the shard has no usable connection
        right now (e.g. its CurveZMQ handshake was refused). Never blocks: the
        caller's resend timer tries again, so an unreachable shard ends in a
        timeout error instead of a hang.

        Large frames are sent zero-copy: their buffers must stay unchanged
        until the request is answered. Passing the same buffer object again
        (a reused gradient buffer, a resend) reuses its ZeroMQ message, which
        saves pyzmq's per-send release notification. A header-only request to a
        shard with a doorbell rings it instead."""
        if ring(self.bells, shard, frames):
            return True
        try:
            self._socks[shard].send_multipart([self._reusable(shard, i, f) for i, f in enumerate(frames)],
                                              flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def _reusable(self, shard: int, position: int, frame):
        # One message per (shard, frame position): the last buffer sent there,
        # so nothing but that buffer is kept alive.
        if memoryview(frame).nbytes < TRACK_MIN_BYTES:
            return frame
        cached = self._messages.get((shard, position))
        if cached is None or cached[0] is not frame:
            cached = self._messages[(shard, position)] = (frame, zmq.Frame(frame, copy=False))
        return cached[1]

    def recv(self, timeout_ms: int) -> list[tuple[int, list]]:
        """Every message ready within `timeout_ms`, as (shard, frames)."""
        if self._polled is not None:
            self._polled.sync()
        # zmq_poll over the poller's items: what Poller.poll does for an int timeout, less its Python
        ready = zmq.zmq_poll(self._poller.sockets, timeout_ms)
        out: list = []
        for sock, _ in ready:
            if self._polled is not None and self._polled.take(sock, out):
                continue
            if self.links is not None and self.links.owns(sock):
                self.links.read(sock)
                continue
            parts = sock.recv_multipart(copy=False)
            out.append((self._index[sock], [p.buffer for p in parts]))
        return out

    def close(self) -> None:
        self._messages.clear()
        if self.links is not None:
            self.links.close(self._socks)
        for sock in self._socks:
            sock.close(0)
        self._socks = []
        if self.bells is not None:
            self.bells.close()


@contextmanager
def loopback_pipe():
    """A PUSH -> PULL pair over TCP loopback in this process, as (send, receive) callables
    (multipart, zero-copy): what `psgd sim profile` times one message through."""
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield (lambda frames: push.send_multipart(frames, copy=False)), (lambda: pull.recv_multipart(copy=False))
    finally:
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()
