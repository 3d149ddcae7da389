"""The Ray actor parameter server peer for `psgd bench comm` (optional: only
when `ray` is installed).

It follows the parameter-server pattern of Ray's documentation: an actor
holds a flat fp32 vector, and `apply_gradients(g)` applies plain SGD and
returns the new weights. The driver calls it with a numpy gradient and waits
for the weights (`ray.get`), so each call moves the gradient into Ray's
object store and the weights back out, which on one host is shared memory.
Ray runs in a child process of its own (a local single-node Ray started and
stopped there), so the benchmark process never holds Ray's state.
"""
from __future__ import annotations

import importlib.util
import time

from psgd.bench.procs import bench_context

__all__ = ["ray_available", "time_ray_actor_ps"]

RAY_TIMEOUT_S = 300.0


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def _ray_child(numel: int, lr: float, warmup: int, repeats: int, conn) -> None:
    import numpy as np
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             configure_logging=False)
    try:
        @ray.remote
        class ParameterServer:
            def __init__(self, n: int, step: float):
                self.params = np.zeros(n, dtype=np.float32)
                self.lr = np.float32(step)

            def apply_gradients(self, grad):
                self.params -= self.lr * grad
                return self.params

        ps = ParameterServer.remote(numel, lr)
        grad = (np.random.default_rng(0).standard_normal(numel) * 1e-3).astype(np.float32)
        times = []
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            out = ray.get(ps.apply_gradients.remote(grad))
            dt = time.perf_counter() - t0
            if out.size != numel:
                raise RuntimeError("Ray parameter server returned the wrong size")
            if i >= warmup:
                times.append(dt)
        conn.send(times)
    finally:
        ray.shutdown()
        conn.close()


def time_ray_actor_ps(numel: int, warmup: int, repeats: int, lr: float = 1e-6) -> list[float]:
    """Seconds per apply_gradients round trip; raises RuntimeError if Ray fails."""
    ctx = bench_context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_ray_child, args=(numel, lr, warmup, repeats, child), daemon=False)
    proc.start()
    child.close()
    try:
        if not parent.poll(RAY_TIMEOUT_S):
            raise RuntimeError(f"Ray parameter server gave no result (exit code {proc.exitcode})")
        return parent.recv()
    except EOFError:
        raise RuntimeError(f"Ray parameter server died (exit code {proc.exitcode})") from None
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=10)
