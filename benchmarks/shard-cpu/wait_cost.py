"""What one wait of a shard's loop costs with many same-host workers' doorbells registered.

A shard waits on its ROUTER socket and on every same-host client's doorbell (a pipe). This times
one non-blocking wait (the shard's loop under load: a request is usually queued already) with
1..128 doorbells registered, two ways: zmq.Poller (what the shard used before: every registered
item is handed to the kernel on each call) and select.epoll over the socket's descriptor and the
doorbells (what psgd.wire.transport.sockets.ServerSocket uses now). Thread CPU time, median of
--repeats windows of --waits waits; one doorbell holds a byte, so every wait finds one ready.

    python benchmarks/shard-cpu/wait_cost.py
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import time

import zmq


def _window(wait, waits: int) -> float:
    t0 = time.thread_time_ns()
    for _ in range(waits):
        wait()
    return (time.thread_time_ns() - t0) / waits / 1e3


def measure(bells: int, waits: int, repeats: int) -> dict:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind("tcp://127.0.0.1:*")
    pipes = [os.pipe() for _ in range(bells)]
    poller, epoll = zmq.Poller(), select.epoll()
    poller.register(sock, zmq.POLLIN)
    epoll.register(sock.get(zmq.FD), select.EPOLLIN)
    for r, _w in pipes:
        poller.register(r, zmq.POLLIN)
        epoll.register(r, select.EPOLLIN)
    os.write(pipes[0][1], b"x")
    try:
        zp = [_window(lambda: poller.poll(0), waits) for _ in range(repeats)]
        ep = [_window(lambda: (sock.get(zmq.EVENTS), epoll.poll(0)), waits) for _ in range(repeats)]
    finally:
        epoll.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)
        sock.close(0)
        ctx.term()
    return {"bells": bells, "zmq_poller_us": round(statistics.median(zp), 2),
            "epoll_us": round(statistics.median(ep), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bells", default="1,16,64,128")
    ap.add_argument("--waits", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = [measure(int(b), args.waits, args.repeats) for b in args.bells.split(",")]
    print(json.dumps({"rows": rows, "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
