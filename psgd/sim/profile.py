"""`psgd sim profile`: a host's costs, measured in this process without the user's model.

Each figure is the CPU time of this process (time.process_time: on a shared
machine, the wall clock would count other processes' turns), median of
repeated runs, at two sizes where bytes decide the cost, fitted as fixed +
per byte (psgd.sim.host_profile.Linear). Nothing here reads a run.
"""
from __future__ import annotations

import dataclasses
import platform
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from psgd.core.rules import RULES
from psgd.sim.host_profile import HostProfile, Linear
from psgd.sim.profile_compute import cpu_seconds, cuda_seconds, measure_compute
from psgd.sim.profile_requests import measure_requests
from psgd.sim.profile_worker import measure_worker_loop

__all__ = ["measure_host_profile", "kernel_tick_hz", "SMALL_BYTES", "LARGE_BYTES"]

SMALL_BYTES, LARGE_BYTES = 4096, 4 << 20   # the two gradient sizes every linear cost is fitted on


def _cpu_s(fn: Callable[[], object], min_s: float = 0.05, repeats: int = 5) -> float:
    """CPU seconds one call takes, on the whole process's clock (profile_compute.cpu_seconds)."""
    return cpu_seconds(fn, min_s, repeats, clock=time.process_time)


def _linear(make: Callable[[int], Callable[[], object]], scale: float = 1.0) -> Linear:
    """The cost of `make(nbytes)()` at the two sizes, times `scale`, fitted."""
    return Linear.fit((SMALL_BYTES, scale * _cpu_s(make(SMALL_BYTES))), (LARGE_BYTES, scale * _cpu_s(make(LARGE_BYTES))))


def _message() -> Linear:
    """One push-sized message over TCP loopback (header packed, sent, received, parsed), in
    one process: half of it is charged at each end."""
    from psgd.wire import protocol as P
    from psgd.wire.frames import tensor_frame
    from psgd.wire.transport import loopback_pipe
    with loopback_pipe() as (send, receive):
        def make(nbytes: int):
            grad = torch.zeros(nbytes // 4)
            record = P.Push(rank=1, seq=1, clock=1, numel=grad.numel())

            def once():
                send(P.encode(record, [tensor_frame(grad)]))
                P.decode(receive())
            return once
        return _linear(make, scale=0.5)


def _codecs() -> tuple[dict[str, Linear], dict[str, Linear]]:
    from psgd.wire.codecs import CODECS, WireEncoder, codec_named
    encode, decode = {}, {}
    for name in sorted(CODECS):
        def make_encode(nbytes: int, name=name):
            enc, grad = WireEncoder(name, [nbytes // 4]), torch.randn(nbytes // 4)
            return lambda: enc.encode(0, grad)

        def make_decode(nbytes: int, name=name):
            grad = torch.randn(nbytes // 4)
            e = WireEncoder(name, [grad.numel()]).encode(0, grad)
            out, codec = torch.empty_like(grad), codec_named(name)
            return lambda: codec.decode(e.frames, grad.numel(), e.nnz, e.scale, out)
        encode[name], decode[name] = _linear(make_encode), _linear(make_decode)
    return encode, decode


def _apply() -> dict[str, Linear]:
    """A shard's service of one fp32 push (its checks, the update rule, its bookkeeping), per rule."""
    from psgd.config import Config, override_config
    from psgd.servers.service import PushFields, ShardService
    from psgd.servers.state import ShardState
    out = {}
    for rule in sorted(RULES):
        def make(nbytes: int, rule=rule):
            cfg = override_config(Config(), [f"optimizer.name={rule}", "optimizer.lr=1e-6"])
            numel = nbytes // 4
            service = ShardService(ShardState(cfg, 0, torch.zeros(numel)))
            service.register(0, 0.0)
            grad, seq = torch.full((numel,), 1e-3), [0]

            def once():
                seq[0] += 1
                service.push(PushFields(0, seq[0], seq[0] - 1, 0, numel), 0.0, grad)
            return once
        out[rule] = _linear(make)
    return out


def kernel_tick_hz(sources: Optional[list] = None) -> Optional[float]:
    """The kernel's scheduler tick (CONFIG_HZ), from its configuration (`sources`: (path, opener); by default
    /proc/config.gz, else /boot/config-RELEASE); None where none is readable (not Linux, or not kept)."""
    import gzip
    import re
    if sources is None:
        sources = [(Path("/proc/config.gz"), gzip.open), (Path(f"/boot/config-{platform.release()}"), open)]
    for path, opener in sources:
        try:
            with opener(path, "rt") as f:
                found = re.search(r"^CONFIG_HZ=(\d+)$", f.read(), re.MULTILINE)
        except OSError:
            continue
        if found:
            return float(found.group(1))
    return None


def _copies() -> tuple[float, float]:
    n = LARGE_BYTES * 4 // 4
    host = torch.empty(n, pin_memory=True)
    dev = torch.empty(n, device="cuda")
    h2d = cuda_seconds(lambda: dev.copy_(host, non_blocking=True), calls=50)
    d2h = cuda_seconds(lambda: host.copy_(dev, non_blocking=True), calls=50)
    return round(4 * n / h2d / 1e9, 3), round(4 * n / d2h / 1e9, 3)


def measure_host_profile(device: str = "cpu", note: Optional[str] = None) -> HostProfile:
    """Every figure of a HostProfile, measured here on one thread (as every psgd process runs);
    `device` cuda times the matrix products, launches and copies on the first GPU; `note`: what
    the machine is, kept in the profile's notes. The request probe runs a shard in a child process; the
    worker-loop probe (psgd.sim.profile_worker) a real worker and shard, each in its own."""
    torch.set_num_threads(1)
    dev = torch.device(device)
    big = torch.empty(16 << 20, dtype=torch.uint8)
    copy = big.clone()
    memory = round(big.numel() / _cpu_s(lambda: copy.copy_(big), min_s=0.05) / 1e9, 3)
    encode, decode = _codecs()
    compute = measure_compute(device)
    h2d, d2h = _copies() if dev.type == "cuda" else (None, None)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else (platform.processor() or platform.machine())
    measured_on = (f"{name}, {platform.node()}, torch {torch.__version__}, one thread, "
                   f"{time.strftime('%Y-%m-%d', time.gmtime())} (psgd sim profile --device {device})")
    message, apply = _message(), _apply()
    requests = measure_requests(
        lambda n: encode["none"].seconds(n) + 2 * message.seconds(n) + decode["none"].seconds(n),
        lambda n: 2 * message.seconds(n) + decode["none"].seconds(n) + apply["sgd"].seconds(n) + encode["none"].seconds(n),
        (SMALL_BYTES, LARGE_BYTES))
    parts = HostProfile(measured_on=measured_on, device=device, message=message, encode=encode, decode=decode,
                       apply=apply, memory_gbytes_per_s=memory, worker_loop_us=0.0,
                       request_client=requests.client, request_client_send_share=requests.client_send_share,
                       request_shard=requests.shard, request_shard_wake_us=requests.shard_wake_us,
                       notes={"machine": note} if note else {}, tick_hz=kernel_tick_hz(),
                       host_to_device_gbytes_per_s=h2d, device_to_host_gbytes_per_s=d2h, **compute)
    loop = measure_worker_loop(parts)
    return dataclasses.replace(parts, worker_loop_us=loop.loop_us, worker_step_extra=loop.step_extra,
                               worker_exchange_extra=loop.exchange_extra)
