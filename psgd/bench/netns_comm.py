"""The cross-host row of `psgd bench comm`: psgd's push+pull and the raw
ZeroMQ check+SGD floor between two network namespaces joined by veth.

The shard and the floor server run in the "server" namespace, in pid and
mount namespaces of their own (as on another host, so psgd falls back to TCP
by itself; the row records that it did); the timing client runs in the "client" namespace
and alternates one psgd round trip and one floor round trip per iteration.
Each part is this module run as `python -m psgd.bench.netns_comm ROLE ...`.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

import torch

from psgd.bench.netns import NetnsPair

__all__ = ["run_netns_row", "median_ms"]

START_TIMEOUT_S = 120.0


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def _shard(numel: int, host: str) -> None:
    from psgd.bench.procs import bench_config, bench_layout
    from psgd.servers.shard import ShardServer
    server = ShardServer(bench_config(1), 0, f"{host}:0", torch.zeros(numel),
                                    bench_layout(numel, 1).fingerprint)
    print(server.address.replace("tcp://", ""), flush=True)
    server.serve(threading.Event())  # until SHUTDOWN


def _raw(numel: int, host: str) -> None:
    from psgd.bench.raw_zmq import RawSgdStep, serve_raw_echo
    serve_raw_echo(4 * numel, lambda address: print(address, flush=True), host=host, handle=RawSgdStep(numel))


def _client(shard: str, raw: str, numel: int, warmup: int, repeats: int) -> None:
    from psgd.bench.procs import bench_layout
    from psgd.bench.raw_zmq import RawEchoClient
    from psgd.workers.client import PSClient
    client = PSClient([shard], bench_layout(numel, 1), heartbeat_s=None)
    floor = RawEchoClient(f"tcp://{raw}")
    try:
        client.register()
        grads = [torch.randn(numel) * 1e-3]
        payload = memoryview(grads[0].numpy()).cast("B")
        psgd_t, raw_t = [], []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            out = client.push_pull(grads)
            t1 = time.perf_counter()
            got = floor.round_trip(payload).nbytes
            t2 = time.perf_counter()
            if out[0].numel() != numel or got != 4 * numel:
                raise RuntimeError("a round trip returned the wrong number of bytes")
            if i >= warmup:
                psgd_t.append(t1 - t0)
                raw_t.append(t2 - t1)
        print(json.dumps({"psgd": psgd_t, "raw_sgd": raw_t, "shared_memory": client.shared_memory[0]}), flush=True)
    finally:
        client.shutdown_servers()
        client.close()
        floor.stop_server()
        floor.close()


def _start(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()  # the bound address
    if not line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{' '.join(cmd[-3:])} did not start (exit code {proc.returncode})")
    return proc, line.replace("tcp://", "")


def run_netns_row(size_bytes: int, warmup: int, repeats: int) -> dict:
    """Per-iteration seconds across the namespaces: {"psgd": [...], "raw_sgd": [...],
    "shared_memory": False}. Needs root; raises NetnsError otherwise."""
    numel = size_bytes // 4
    me = [sys.executable, "-m", "psgd.bench.netns_comm"]
    with NetnsPair() as net:
        procs = []
        try:
            shard, shard_addr = _start(net.command(net.server_ns, me + ["shard", str(numel), net.server_ip]))
            procs.append(shard)
            raw, raw_addr = _start(net.command(net.server_ns, me + ["raw", str(numel), net.server_ip]))
            procs.append(raw)
            client = subprocess.run(net.command(net.client_ns, me + ["client", shard_addr, raw_addr, str(numel),
                                                                     str(warmup), str(repeats)], private_shm=False),
                                    capture_output=True, text=True, timeout=600)
            if client.returncode != 0:
                raise RuntimeError(f"cross-host client failed: {client.stderr.strip()[-500:]}")
            return json.loads(client.stdout.strip().splitlines()[-1])
        finally:
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()


def main(argv: list[str]) -> None:
    role, args = argv[0], argv[1:]
    torch.set_num_threads(1)
    if role == "shard":
        _shard(int(args[0]), args[1])
    elif role == "raw":
        _raw(int(args[0]), args[1])
    elif role == "client":
        _client(args[0], args[1], int(args[2]), int(args[3]), int(args[4]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
