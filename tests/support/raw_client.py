"""A bare DEALER connection that speaks the wire format directly, for tests that send a
shard what no PSClient would (forged fields, frames, versions)."""
from __future__ import annotations

import msgpack
import zmq

from psgd.wire import protocol as P


class Raw:
    def __init__(self, address: str):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{address}")
        self.req = 100

    def send(self, mtype, fields: dict, *frames, version=P.PROTOCOL_VERSION) -> None:
        self.req += 1
        self.sock.send_multipart([msgpack.packb([version, int(mtype), self.req, fields], use_bin_type=True),
                                  *frames])

    def reply(self, timeout_ms=5000):
        """The next reply's record, or None when none comes within `timeout_ms`."""
        if not self.sock.poll(timeout_ms):
            return None
        rec, _ = P.decode(self.sock.recv_multipart())
        return rec

    def ask(self, mtype, fields: dict, *frames, **kw):
        self.send(mtype, fields, *frames, **kw)
        return self.reply()

    def exchange(self, mtype, fields: dict, *frames, timeout_ms=10_000):
        """(record, frames) of the reply to this request; replies to earlier ones (a register
        repeated while the shard started) are skipped."""
        self.send(mtype, fields, *frames)
        while True:
            assert self.sock.poll(timeout_ms), f"no reply to {mtype.name}"
            rec, payload = P.decode(self.sock.recv_multipart(copy=False))
            if rec.req == self.req:
                return rec, payload

    def close(self):
        self.sock.close(0)
