"""ZeroMQ sockets: the only module that imports zmq.

A shard serves on one ROUTER socket; a client holds one DEALER socket per
shard so it can send to every shard before waiting for any reply. Frames are
sent with copy=False (pyzmq copies frames below its copy threshold itself,
which is cheaper for small headers) and received as zero-copy memoryviews.
Sockets are not thread-safe: use each from one thread.
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

import zmq

__all__ = ["ServerSocket", "ShardConnections", "SendTracker", "TransportError", "tcp_address",
           "serve_raw_echo", "RawEchoClient"]


class TransportError(RuntimeError):
    pass


def tcp_address(hostport: str) -> str:
    return hostport if hostport.startswith(("tcp://", "ipc://", "inproc://")) else f"tcp://{hostport}"


def _context() -> zmq.Context:
    # One context per process; zmq.Context.instance() is fork-unsafe, so key it by pid.
    global _CTX, _CTX_PID
    if _CTX is None or _CTX_PID != os.getpid():
        _CTX, _CTX_PID = zmq.Context(), os.getpid()
    return _CTX


_CTX: Optional[zmq.Context] = None
_CTX_PID = -1


class ServerSocket:
    """A bound ROUTER socket. `recv` returns (identity, frames) or None on timeout."""

    def __init__(self, address: str, max_message_bytes: int = -1):
        self._sock = _context().socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        # Deferred replies can pile up for a slow client; never drop them silently.
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.SNDHWM, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        try:
            self._sock.bind(tcp_address(address))
        except zmq.ZMQError as exc:
            self._sock.close(0)
            raise TransportError(f"cannot bind {address}: {exc}") from None
        self.address = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)

    def recv(self, timeout_ms: int) -> Optional[tuple[bytes, list]]:
        if not self._poller.poll(timeout_ms):
            return None
        parts = self._sock.recv_multipart(copy=False)
        return parts[0].bytes, [p.buffer for p in parts[1:]]

    def send(self, identity: bytes, frames: Sequence) -> bool:
        """Send a reply; returns False if the peer is gone (its reply is dropped)."""
        try:
            self._sock.send_multipart([identity, *frames], copy=False)
            return True
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return False
            raise

    def send_tracked(self, identity: bytes, frames: Sequence) -> Optional["SendTracker"]:
        """Send a reply whose buffers the caller will modify later; returns a
        tracker that reports when ZeroMQ no longer reads them, or None if the
        peer is gone (nothing was sent)."""
        try:
            self._sock.send(identity, zmq.SNDMORE, copy=False)
            trackers = []
            for i, frame in enumerate(frames):
                flags = zmq.SNDMORE if i < len(frames) - 1 else 0
                trackers.append(self._sock.send(frame, flags, copy=False, track=True))
            return SendTracker(zmq.MessageTracker(*trackers))
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                return None
            raise

    def close(self) -> None:
        self._sock.close(0)


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

    def __init__(self, addresses: Sequence[str], max_message_bytes: int = -1):
        self.addresses = list(addresses)
        self._socks = []
        self._poller = zmq.Poller()
        for addr in self.addresses:
            sock = _context().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
            sock.setsockopt(zmq.SNDHWM, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            sock.connect(tcp_address(addr))
            self._poller.register(sock, zmq.POLLIN)
            self._socks.append(sock)
        self._index = {s: i for i, s in enumerate(self._socks)}

    def __len__(self) -> int:
        return len(self._socks)

    def send(self, shard: int, frames: Sequence) -> None:
        self._socks[shard].send_multipart(list(frames), copy=False)

    def recv(self, timeout_ms: int) -> list[tuple[int, list]]:
        """Every message ready within `timeout_ms`, as (shard, frames)."""
        ready = self._poller.poll(timeout_ms)
        out = []
        for sock, _ in ready:
            parts = sock.recv_multipart(copy=False)
            out.append((self._index[sock], [p.buffer for p in parts]))
        return out

    def close(self) -> None:
        for sock in self._socks:
            sock.close(0)
        self._socks = []


# ---- raw ZeroMQ round trip: the baseline psgd's data path is measured against ----

def serve_raw_echo(reply_nbytes: int, on_bound: Callable[[str], None], host: str = "127.0.0.1") -> None:
    """A bare ROUTER that answers every request with one small header frame and
    a preallocated `reply_nbytes` frame, zero-copy, until it receives b"stop".
    Blocks; `on_bound` receives the bound address first."""
    sock = _context().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://{host}:0")
    on_bound(sock.getsockopt(zmq.LAST_ENDPOINT).decode())
    reply = memoryview(bytearray(reply_nbytes))
    try:
        while True:
            parts = sock.recv_multipart(copy=False)
            if parts[1].bytes == b"stop":
                sock.send_multipart([parts[0], b"bye"])
                return
            sock.send_multipart([parts[0], b"reply-header", reply], copy=False)
    finally:
        sock.close(0)


class RawEchoClient:
    """A DEALER talking to `serve_raw_echo`: one request, one reply, zero-copy both ways."""

    def __init__(self, address: str):
        self._sock = _context().socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(address)

    def round_trip(self, payload) -> int:
        """Send a small header and `payload` (a buffer), wait for the reply;
        returns the reply's payload size. Blocks."""
        self._sock.send_multipart([b"request-header", payload], copy=False)
        parts = self._sock.recv_multipart(copy=False)
        return len(parts[-1].buffer)

    def stop_server(self) -> None:
        self._sock.send_multipart([b"stop"])
        self._sock.recv_multipart()

    def close(self) -> None:
        self._sock.close(0)
