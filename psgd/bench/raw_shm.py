"""The shared-memory floors: what any same-host parameter server must do per
push+pull when the bytes travel through shared memory, with no protocol.

One round trip copies the gradient into a segment's request region, copies
it out into the server's own buffer (the client could rewrite its memory
between the check and the update), checks that copy is finite (one pass),
applies plain SGD in place from it, and copies the parameters into the
reply region.

- `ShmSgdFloor` does all of it in the calling process: no wake-up, no second
  core, every byte already in this core's caches. A bound below any server
  in another process.
- `ShmFloorPeer` splits it as a real server must: the caller copies in, a
  server process checks, applies and copies out, and the two wake each other
  with one byte over a pipe (the least a cross-process server can do), so the
  gradient and the parameters cross between cores as they do in psgd.
  With `wake="zmq"` they wake each other with one empty ZeroMQ message each
  way over loopback TCP instead (DEALER to ROUTER, as psgd's sockets): the
  least any server can do that keeps its requests and replies on ZeroMQ, as
  psgd does, and moves only the tensors through shared memory.
"""
from __future__ import annotations

import math
import time

import torch
import zmq

from psgd.bench.procs import bench_context
from psgd.wire.shm.attached import AttachedSegment
from psgd.wire.shm.segment import Segment
from psgd.wire.transport import zmq_context

__all__ = ["ShmSgdFloor", "ShmFloorPeer", "time_shm_floor"]

START_TIMEOUT_S = 120.0


class ShmSgdFloor:
    """Holds a flat fp32 parameter vector and one segment sized for it."""

    def __init__(self, numel: int, lr: float = 1e-6):
        self.params = torch.zeros(numel)
        self.lr = lr
        self.numel = numel
        self.skipped = 0  # non-finite gradients refused
        self._segment = Segment.create(4 * numel, 4 * numel)
        self._server = AttachedSegment.attach(self._segment.name, self._segment.token_hex, 4 * numel, 4 * numel)
        self._segment.unlink()  # the mappings are all this process needs
        self._grad = torch.empty(numel)
        self._req = 0

    def round_trip(self, grad: torch.Tensor) -> torch.Tensor:
        """One push+pull of `grad` (fp32, `numel` elements); returns the
        parameters as they lie in the reply region (valid until the next call)."""
        gen, nbytes = self._segment.put_request(grad)
        g = self._grad
        if self._server.read_request(gen, g) and math.isfinite(g.sum().item()):
            self.params.add_(g, alpha=-self.lr)
        else:
            self.skipped += 1
        self._req += 1
        self._server.put_reply(self._req, self.params)
        return self._segment.reply_tensor(self._req, torch.float32, self.numel)

    def close(self) -> None:
        self._server.close()
        self._segment.close()


def time_shm_floor(numel: int, warmup: int, repeats: int) -> list[float]:
    """Seconds per floor round trip, after `warmup` untimed ones."""
    floor = ShmSgdFloor(numel)
    grad = torch.randn(numel) * 1e-3
    times = []
    try:
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            floor.round_trip(grad)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    finally:
        floor.close()
    return times


class _PipeWake:
    """The floor server's side of a one-byte pipe wake-up."""

    def __init__(self, conn):
        self.conn = conn
        conn.send_bytes(b"ready")

    def recv(self) -> bytes:
        return self.conn.recv_bytes()

    def reply(self) -> None:
        self.conn.send_bytes(b"")


class _ZmqWake:
    """The floor server's side of an empty-ZeroMQ-message wake-up (a ROUTER)."""

    def __init__(self, conn):
        self.sock = zmq_context().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        conn.send_bytes(b"ready %d" % self.sock.bind_to_random_port("tcp://127.0.0.1"))
        self._peer = b""

    def recv(self) -> bytes:
        self._peer, msg = self.sock.recv_multipart()
        return msg

    def reply(self) -> None:
        self.sock.send_multipart([self._peer, b""])


def _floor_server(name: str, token: str, numel: int, lr: float, conn, wake: str = "pipe") -> None:
    torch.set_num_threads(1)
    seg = AttachedSegment.attach(name, token, 4 * numel, 4 * numel)
    params, g = torch.zeros(numel), torch.empty(numel)
    channel = _ZmqWake(conn) if wake == "zmq" else _PipeWake(conn)
    req = 0
    while True:
        msg = channel.recv()
        if msg == b"stop":
            return
        req += 1
        if seg.read_request(int(msg), g) and math.isfinite(g.sum().item()):
            params.add_(g, alpha=-lr)
        seg.put_reply(req, params)
        channel.reply()


class ShmFloorPeer:
    """The floor's server in a process of its own; `round_trip` from this one.
    `wake`: "pipe" (one byte each way) or "zmq" (one empty ZeroMQ message)."""

    def __init__(self, numel: int, lr: float = 1e-6, wake: str = "pipe"):
        if wake not in ("pipe", "zmq"):
            raise ValueError(f"wake must be 'pipe' or 'zmq', got {wake!r}")
        self.numel = numel
        self._segment = Segment.create(4 * numel, 4 * numel)
        ctx = bench_context()
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_floor_server, args=(self._segment.name, self._segment.token_hex, numel, lr,
                                                             child, wake), daemon=True)
        self._proc.start()
        child.close()
        try:
            ready = self._conn.recv_bytes() if self._conn.poll(START_TIMEOUT_S) else b""
            if not ready.startswith(b"ready"):
                raise RuntimeError(f"shared-memory floor server did not start (exit code {self._proc.exitcode})")
        finally:
            self._segment.unlink()
        self._sock = None
        if wake == "zmq":
            self._sock = zmq_context().socket(zmq.DEALER)
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.connect(f"tcp://127.0.0.1:{int(ready.split()[1])}")
        self._req = 0

    def _wake(self, msg: bytes) -> None:
        if self._sock is not None:
            self._sock.send(msg)
        else:
            self._conn.send_bytes(msg)

    def round_trip(self, grad: torch.Tensor) -> torch.Tensor:
        gen, _ = self._segment.put_request(grad)
        self._wake(b"%d" % gen)
        if self._sock is not None:
            self._sock.recv()
        else:
            self._conn.recv_bytes()
        self._req += 1
        return self._segment.reply_tensor(self._req, torch.float32, self.numel)

    def close(self) -> None:
        try:
            self._wake(b"stop")
        except (OSError, zmq.ZMQError):
            pass
        if self._sock is not None:
            self._sock.close(0)
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.terminate()
        self._conn.close()
        self._segment.close()
