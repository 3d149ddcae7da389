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


def _ray_child(numels: list[int], lr: float, warmup: int, repeats: int, conn) -> None:
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

        out = {}
        for numel in numels:
            ps = ParameterServer.remote(numel, lr)
            grad = (np.random.default_rng(0).standard_normal(numel) * 1e-3).astype(np.float32)
            times = []
            for i in range(warmup + repeats):
                t0 = time.perf_counter()
                got = ray.get(ps.apply_gradients.remote(grad))
                dt = time.perf_counter() - t0
                if got.size != numel:
                    raise RuntimeError("Ray parameter server returned the wrong size")
                if i >= warmup:
                    times.append(dt)
            out[numel] = times
            ray.kill(ps)
        conn.send(out)
    finally:
        ray.shutdown()
        conn.close()


def _once(numels: list[int], warmup: int, repeats: int, lr: float) -> dict[int, list[float]]:
    ctx = bench_context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_ray_child, args=(numels, lr, warmup, repeats, child), daemon=False)
    proc.start()
    child.close()
    try:
        if not parent.poll(RAY_TIMEOUT_S):
            raise RuntimeError(f"Ray parameter server gave no result in {RAY_TIMEOUT_S:g} s")
        return parent.recv()
    except EOFError:
        raise RuntimeError("Ray parameter server died (Ray could not start or failed)") from None
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=10)


def time_ray_actor_ps(numels: list[int], warmup: int, repeats: int, lr: float = 1e-6,
                      attempts: int = 2) -> dict[int, list[float]]:
    """Seconds per apply_gradients round trip for each vector size, all in one
    Ray session (Ray takes seconds to start). A start that fails (Ray's own
    startup can time out on a loaded machine) is tried again; RuntimeError
    after `attempts`."""
    for attempt in range(attempts):
        try:
            return _once(list(numels), warmup, repeats, lr)
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
