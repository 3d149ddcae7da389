"""What a shaped link delivers to one message the size of a push, measured with raw sockets.

A token bucket's stated rate is what it lets through in the long run; a message
that follows an idle gap (as a push does, after its worker's device time) also
meets TCP's restart from a small window and the bucket's timer, which on a
loaded machine fires late. So the link is measured as the testbed uses it: one
host sends a message of `nbytes` to another over their shaped links, waits for
a one-byte answer, sleeps `gap_s`, and again; a one-byte exchange the same way
gives the round trip to take off. The rate is nbytes over the median message
time less the median one-byte round trip. No psgd process takes part: this is
the link's physics, not a fit to any run.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
from dataclasses import dataclass

from psgd.bench.shaped_net import LinkShape, ShapedStar

__all__ = ["LinkProbe", "probe_link"]

PORT = 7300
ECHO = """
import socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port)); s.listen(1); print("ready", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    head = c.recv(8)
    if len(head) < 8:
        break
    n, got = int.from_bytes(head, "big"), 0
    while got < n:
        got += len(c.recv(min(1 << 16, n - got)))
    c.sendall(b"k")
"""
SEND = """
import socket, sys, time, json
ip, port, nbytes, count, gap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
c = socket.create_connection((ip, port), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = {}
for size in (1, nbytes):
    times = []
    for _ in range(count):
        time.sleep(gap)
        t0 = time.perf_counter()
        c.sendall(size.to_bytes(8, "big") + b"x" * size)
        assert c.recv(1) == b"k"
        times.append(time.perf_counter() - t0)
    out[size] = times
print(json.dumps({"ping": out[1], "message": out[nbytes]}))
"""


@dataclass(frozen=True)
class LinkProbe:
    nbytes: int
    message_s_p50: float
    ping_s_p50: float

    @property
    def mbit_per_s(self) -> float:
        return self.nbytes * 8 / (self.message_s_p50 - self.ping_s_p50) / 1e6


def probe_link(shape: LinkShape, nbytes: int, count: int = 20, gap_s: float = 0.05) -> LinkProbe:
    """`count` messages of `nbytes` (and as many one-byte ones) between two hosts on `shape`."""
    import json
    with ShapedStar(["a", "b"], shape) as net:
        echo = subprocess.Popen(net.command("b", [sys.executable, "-c", ECHO, net.ip("b"), str(PORT)]),
                                stdout=subprocess.PIPE, text=True)
        try:
            if echo.stdout.readline().strip() != "ready":
                raise RuntimeError("the link probe's receiver did not start")
            sent = subprocess.run(net.command("a", [sys.executable, "-c", SEND, net.ip("b"), str(PORT), str(nbytes),
                                                    str(count), str(gap_s)]),
                                  capture_output=True, text=True, timeout=120)
            if sent.returncode != 0:
                raise RuntimeError(f"the link probe's sender failed: {sent.stderr.strip()[-300:]}")
            times = json.loads(sent.stdout)
        finally:
            echo.kill()
            echo.wait()
    return LinkProbe(nbytes, statistics.median(times["message"]), statistics.median(times["ping"]))
