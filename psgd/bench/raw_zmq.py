"""Raw ZeroMQ round trips: the baselines psgd's data path is measured against.

These bypass psgd's protocol on purpose: with raw_shm.py's floors they hold
the only zmq code outside psgd.wire.transport; nothing outside psgd.bench uses them.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
import zmq

from psgd.wire.payload import tensor_frame
from psgd.wire.transport import zmq_context

__all__ = ["serve_raw_echo", "RawEchoClient", "RawSgdStep", "RAW_SGD_LR"]

RAW_SGD_LR = 1e-6  # the learning rate bench shards use too (bench_procs.bench_config)


class RawSgdStep:
    """The floor server's work per push: view the gradient frame, check it is
    finite (one pass), apply plain SGD in place, reply with the parameters."""

    def __init__(self, numel: int, lr: float = RAW_SGD_LR):
        self.params = torch.zeros(numel)
        self.lr = lr
        self._frame = tensor_frame(self.params)

    def __call__(self, payload: memoryview):
        grad = torch.frombuffer(payload, dtype=torch.float32)
        if math.isfinite(grad.sum().item()):
            self.params.add_(grad, alpha=-self.lr)
        return self._frame


def serve_raw_echo(reply_nbytes: int, on_bound: Callable[[str], None], host: str = "127.0.0.1",
                   handle: Optional[Callable[[memoryview], Any]] = None) -> None:
    """A bare ROUTER answering every request with one small header frame and a
    `reply_nbytes` frame, zero-copy, until it receives b"stop". Blocks;
    `on_bound` receives the bound address first.

    Without `handle` the reply is a preallocated buffer: the bytes are moved
    and nothing else. With it, `handle(payload)` is called on each request's
    last frame and returns the buffer to reply with; that buffer is sent
    zero-copy and tracked, and the next `handle` call waits until ZeroMQ has
    released it (the handler may then change it in place)."""
    sock = zmq_context().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(f"tcp://{host}:0")
    on_bound(sock.getsockopt(zmq.LAST_ENDPOINT).decode())
    reply = memoryview(bytearray(reply_nbytes))
    tracker = None
    try:
        while True:
            parts = sock.recv_multipart(copy=False)
            if parts[1].bytes == b"stop":
                sock.send_multipart([parts[0], b"bye"])
                sock.close(linger=1000)  # closing at once could drop the confirmation: the client would wait it out
                return
            if handle is None:
                sock.send_multipart([parts[0], b"reply-header", reply], copy=False)
                continue
            if tracker is not None:
                tracker.wait()
            out = handle(parts[-1].buffer)
            sock.send_multipart([parts[0], b"reply-header"], zmq.SNDMORE)
            tracker = sock.send(out, copy=False, track=True)
    finally:
        if not sock.closed:
            sock.close(0)


class RawEchoClient:
    """A DEALER talking to `serve_raw_echo`: one request, one reply, zero-copy both ways."""

    def __init__(self, address: str):
        self._sock = zmq_context().socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(address)

    def round_trip(self, payload) -> memoryview:
        """Send a small header and `payload` (a buffer), wait for the reply;
        returns the reply's payload (valid until the next call). Blocks."""
        self._sock.send_multipart([b"request-header", payload], copy=False)
        parts = self._sock.recv_multipart(copy=False)
        return parts[-1].buffer

    def stop_server(self, timeout_s: float = 5.0) -> bool:
        """Ask the server to exit; False if it did not confirm in time (e.g. it died)."""
        self._sock.send_multipart([b"stop"])
        if not self._sock.poll(int(timeout_s * 1000)):
            return False
        self._sock.recv_multipart()
        return True

    def close(self) -> None:
        self._sock.close(0)
