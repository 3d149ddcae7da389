"""ZeroMQ sockets: the only module that imports zmq.

A shard serves on one ROUTER socket; a client holds one DEALER socket per
shard so it can send to every shard before waiting for any reply. Frames are
sent with copy=False (pyzmq copies frames below its copy threshold itself,
which is cheaper for small headers) and received as zero-copy memoryviews.
Sockets are not thread-safe: use each from one thread.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import zmq

__all__ = ["ServerSocket", "ShardConnections", "TransportError", "tcp_address"]


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

    def close(self) -> None:
        self._sock.close(0)


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
