"""Child processes shared by the benchmarks: shard servers on synthetic flat
parameters, each child at one torch thread, started from multiprocessing's fork
server: a clean interpreter (no inherited sockets, threads or torch state) that
has imported torch and the benchmarks' modules once. Spawning instead cost each
child about 3 s of CPU for those imports.

It imports the real shard (psgd.servers.shard): the benchmarks measure the server users run.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from psgd.config import load_config
from psgd.core.sharding import Layout, make_layout
from psgd.servers.record import record_path
from psgd.servers.shard import ShardServer
from psgd.wire.transport import zmq_context

__all__ = ["BenchShards", "bench_context", "bench_layout", "bench_config", "process_cpu_s", "parse_size", "parse_list"]

START_TIMEOUT_S = 120.0


# What benchmark children import: the fork server imports it once (before its first child), not each child.
PRELOAD = ["torch", "psgd.bench.procs", "psgd.bench.raw_zmq", "psgd.bench.raw_shm", "psgd.bench.rpc_ps",
           "psgd.bench.scale", "psgd.bench.overlap"]


class BenchProcess(mp.context.ForkServerProcess):
    """A benchmark child. It ends with os._exit, as every forked child does: no interpreter
    shutdown, so ZeroMQ's I/O thread would die with the child's last replies still queued
    (a shard's SHUTDOWN acknowledgement, a raw server's "bye"), and the parent would wait for
    them. Terminating the context first makes the I/O thread write them out."""

    def run(self) -> None:
        try:
            super().run()
        finally:
            zmq_context().destroy(linger=0)  # sockets still open (none, normally) are closed first


class BenchContext(mp.context.ForkServerContext):
    Process = BenchProcess


def bench_context() -> BenchContext:
    """The multiprocessing context every benchmark child is started with (every context of
    this kind shares the process's one fork server)."""
    ctx = BenchContext()
    ctx.set_forkserver_preload(PRELOAD)  # read when the fork server starts (on the first child)
    return ctx


def parse_size(text: str) -> int:
    """'1MB' -> 1048576 bytes (binary units: KB, MB, GB); a bare number is bytes."""
    t = text.strip().upper()
    for suffix, mult in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10), ("B", 1)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], mult
            break
    else:
        scale = 1
    try:
        value = float(t)
    except ValueError:
        raise ValueError(f"bad size {text!r}: expected a number with KB, MB or GB") from None
    nbytes = int(value * scale)
    if nbytes < 4 or nbytes % 4:
        raise ValueError(f"bad size {text!r}: must be a positive multiple of 4 bytes (fp32 elements)")
    return nbytes


def parse_list(text: str, convert=int) -> list:
    try:
        items = [convert(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ValueError(f"bad list {text!r}: {exc}") from None
    if not items:
        raise ValueError(f"bad list {text!r}: empty")
    return items


def bench_layout(numel: int, shards: int) -> Layout:
    """One flat fp32 'model' of `numel` elements split evenly over `shards`."""
    return make_layout([("w", (numel,))], shards)


def bench_config(workers: int, optimizer: str = "sgd", lr: float = 1e-6):
    return load_config(None, [f"cluster.workers={workers}", "consistency.mode=asp",
                              f"optimizer.name={optimizer}", f"optimizer.lr={lr:.12f}",
                              "cluster.timeout_s=600", "cluster.heartbeat_s=100"])


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _shard_child(numel: int, shards: int, index: int, workers: int, optimizer: str, token: str,
                 record_dir: Optional[str], conn) -> None:
    torch.set_num_threads(1)
    layout = bench_layout(numel, shards)
    cfg = bench_config(workers, optimizer)
    params = torch.zeros(layout.shard_sizes[index])
    record_to = record_path(Path(record_dir), index) if record_dir else None
    server = ShardServer(cfg, index, "127.0.0.1:0", params, layout.fingerprint, run_token=token, record_to=record_to)
    conn.send(server.address.replace("tcp://", ""))
    conn.close()
    server.serve(threading.Event())  # until a SHUTDOWN request carrying `token`


@dataclass
class BenchShards:
    """`shards` real shard processes serving a flat model of `numel` fp32 elements."""
    numel: int
    shards: int
    workers: int = 1
    optimizer: str = "sgd"
    procs: Optional[list] = None
    addresses: Optional[list[str]] = None
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # SHUTDOWN needs it
    record: bool = False  # the shards record for replay, as a run's shards do (run.record)
    _record_dir: Optional[str] = None

    def __enter__(self) -> "BenchShards":
        ctx = bench_context()
        self.procs, self.addresses = [], []
        pipes = []
        if self.record:
            self._record_dir = tempfile.mkdtemp(prefix="psgd-bench-record-")
        for i in range(self.shards):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_shard_child, args=(self.numel, self.shards, i, self.workers,
                                                       self.optimizer, self.token, self._record_dir, child),
                            daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            pipes.append(parent)
        for i, pipe in enumerate(pipes):
            try:
                if not pipe.poll(START_TIMEOUT_S):
                    raise EOFError
                self.addresses.append(pipe.recv())
            except EOFError:
                self.__exit__(None, None, None)
                raise RuntimeError(f"bench shard {i} did not start (exit code {self.procs[i].exitcode})") from None
        return self

    @property
    def layout(self) -> Layout:
        return bench_layout(self.numel, self.shards)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __exit__(self, *exc) -> None:
        # Callers send SHUTDOWN first; a shard that ignored it is terminated.
        for p in self.procs or []:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if self._record_dir is not None:
            shutil.rmtree(self._record_dir, ignore_errors=True)
