"""Baselines for `psgd bench comm` that are not psgd: a minimal parameter server
on torch.distributed.rpc, and gloo all-reduce between two processes.

Both run in their own pair of child processes on loopback TCP (TensorPipe's
"uv" transport, gloo on `lo`), so they move bytes the way psgd does rather
than through shared memory. Each returns its per-iteration times in seconds.
"""
from __future__ import annotations

import os
import threading
import time
import warnings

import torch

from psgd.bench.procs import bench_context
from psgd.runtime.devices import wait_for_device
from psgd.runtime.ports import free_ports

__all__ = ["RpcParameterServer", "time_torch_rpc_ps", "time_gloo_allreduce"]

PAIR_TIMEOUT_S = 300.0


class RpcParameterServer:
    """The whole server: a flat fp32 tensor, an SGD step, and the new parameters
    returned to the caller. Lives on rank 0. RPCs run on a thread pool and the
    reply is serialised after the call returns, so the update and the copy
    returned happen under a lock (without them, concurrent trainers could read
    torn parameters)."""

    def __init__(self, numel: int, lr: float):
        self.params = torch.zeros(numel)
        self.lr = lr
        self.lock = threading.Lock()

    def push_pull(self, grad: torch.Tensor) -> torch.Tensor:
        with self.lock:
            self.params.add_(grad, alpha=-self.lr)
            return self.params.clone()


def _loopback_env() -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"


def _time_each(call, warmup: int, repeats: int, before=None, check=None, what: str = "") -> list[float]:
    """Seconds per `call()` for `repeats` calls after `warmup` untimed ones;
    `before` runs untimed ahead of each call, `check(result)` must hold after it."""
    times = []
    for i in range(warmup + repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        out = call()
        dt = time.perf_counter() - t0
        if check is not None and not check(out):
            raise RuntimeError(what)
        if i >= warmup:
            times.append(dt)
    return times


def _rpc_child(rank: int, port: int, numel: int, warmup: int, repeats: int, conn, device: str = "cpu") -> None:
    import torch.distributed.rpc as rpc
    # rpc.shutdown() gathers over a gloo group and trips the same torch warning as the gloo child.
    warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
    torch.set_num_threads(1)
    _loopback_env()
    opts = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=4,
                                           rpc_timeout=120, _transports=["uv"], _channels=["basic"])
    name = "ps" if rank == 0 else "trainer"
    rpc.init_rpc(name, rank=rank, world_size=2, rpc_backend_options=opts)
    times = []
    if rank == 1:
        ps = rpc.remote("ps", RpcParameterServer, args=(numel, 1e-6))
        dev = torch.device(device)
        grad = torch.randn(numel, device=dev) * 1e-3

        def push_pull() -> torch.Tensor:
            if dev.type == "cpu":
                return ps.rpc_sync().push_pull(grad)
            out = ps.rpc_sync().push_pull(grad.cpu()).to(dev)  # a device trainer's copies, each way
            wait_for_device(dev)
            return out
        times = _time_each(push_pull, warmup, repeats, check=lambda out: out.numel() == numel,
                           what="torch.rpc parameter server returned the wrong size")
    rpc.shutdown()
    if rank == 1:
        conn.send(times)
    conn.close()


def _gloo_child(rank: int, port: int, numel: int, warmup: int, repeats: int, conn) -> None:
    import torch.distributed as dist
    # torch's own barrier() trips its ProcessGroup deprecation warning; not ours to fix.
    warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
    torch.set_num_threads(1)
    _loopback_env()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.randn(numel)
    times = _time_each(lambda: dist.all_reduce(t), warmup, repeats, before=dist.barrier)
    dist.destroy_process_group()
    if rank == 0:
        conn.send(times)
    conn.close()


def _run_pair(target, numel: int, warmup: int, repeats: int, *extra) -> list[float]:
    ctx = bench_context()
    port = free_ports("127.0.0.1", 1)[0]
    parent, child = ctx.Pipe(duplex=False)
    procs = [ctx.Process(target=target, args=(rank, port, numel, warmup, repeats, child, *extra), daemon=True)
             for rank in (0, 1)]
    for p in procs:
        p.start()
    child.close()
    try:
        if not parent.poll(PAIR_TIMEOUT_S):
            raise RuntimeError(f"{target.__name__} pair gave no result (exit codes "
                               f"{[p.exitcode for p in procs]})")
        return parent.recv()
    except EOFError:
        raise RuntimeError(f"{target.__name__} pair died (exit codes {[p.exitcode for p in procs]})") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


def time_torch_rpc_ps(numel: int, warmup: int, repeats: int, device: str = "cpu") -> list[float]:
    """Seconds per push+pull (rpc_sync) against the torch.rpc parameter server; with a
    `device`, the trainer's gradient lives there and the parameters go back there."""
    return _run_pair(_rpc_child, numel, warmup, repeats, device)


def time_gloo_allreduce(numel: int, warmup: int, repeats: int) -> list[float]:
    """Seconds per gloo all_reduce of `numel` fp32 elements between 2 processes."""
    return _run_pair(_gloo_child, numel, warmup, repeats)
