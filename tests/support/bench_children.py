"""Benchmark shards for the tests (psgd.bench.procs.BenchShards), forked instead of spawned.

BenchShards spawns each shard (a fresh interpreter: about 3 s of CPU importing torch), and
a test that started a client script as `python -c` paid that again. Here both are forked
from one multiprocessing forkserver per test process, which imported torch and psgd once:
a single-threaded interpreter of its own, not the test process with its threads, so each
child still starts clean of the test's sockets and state.

`run_script` runs a client script's source as `python -c` would, in such a child, in a
session of its own; BenchShards inside it fork from that child (before it has a socket or
a thread), so they inherit what the script set up first (resource limits), as a process's
own children do.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from psgd.bench import procs
from psgd.bench.procs import _shard_child as _bench_shard_child

PRELOAD = ["torch", "psgd.bench.procs", "psgd.workers.client", "support.bench_children"]
# A forked child ends with os._exit the moment its target returns; a spawned one first tears
# its interpreter down. Without this pause the ACK of the SHUTDOWN that stopped a shard could
# be lost with the process, and the client wait for it until its retries ran out.
EXIT_PAUSE_S = 0.5


def forkserver_context():
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def shard_child(*args) -> None:
    """psgd.bench.procs' shard child, then EXIT_PAUSE_S before the process ends."""
    _bench_shard_child(*args)
    time.sleep(EXIT_PAUSE_S)


@contextmanager
def forked_bench_shards(context=forkserver_context):
    """While active, BenchShards in this process start their shards from `context`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(procs, "bench_context", context)
        patch.setattr(procs, "_shard_child", shard_child)
        yield


def _script_child(source: str, argv: list[str], out_path: str, err_path: str) -> None:
    os.setsid()  # its own session, as `conftest.spawn` starts a script: killed with its children
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["-c", *argv]
    with forked_bench_shards(lambda: mp.get_context("fork")):
        exec(compile(source, "<script>", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()
    sys.stderr.flush()


def run_script(source: str, argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Run `source` as `python -c source *argv` would, in a forked child; returns (exit code,
    stdout, stderr). The child's session is killed when it ends or after `timeout`."""
    with tempfile.TemporaryDirectory(prefix="psgd-test-script-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        proc = forkserver_context().Process(target=_script_child, args=(source, argv, str(out), str(err)))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
        try:  # what the script forked and left behind (its shards, a hostile half)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.exitcode, out.read_text(), err.read_text()
