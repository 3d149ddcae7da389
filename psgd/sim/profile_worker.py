"""`psgd sim profile`'s worker-loop probe: the real worker role, against a real shard, each end a process.

The other probes time a step's parts one at a time, each in a tight loop on
warm caches. A real worker's step costs more than its parts: it starts after a
wait (its device time, its pull) with its model's parameters and gradients
gone from the caches, and its exchange flattens the gradients and loads the
parameters into the model. This probe runs the worker role as `psgd launch`
runs it (`python -m psgd.cli worker`) and a shard (`python -m psgd.cli
server`) on loopback, with the probe's own model (the built-in MLP at two
widths, on the built-in digits), every step waiting out a stated device time
(PROBE_DEVICE_MS: a worker on an accelerator waits so), and reads the worker's
own CPU by phase from its done event (psgd.runtime.host.LoopCpu). Per step,
what each phase spent beyond what the profile's parts charge it (the step's
counted compute, psgd.sim.op_count; the exchange's framing, codec and
request, HostProfile.worker_exchange_s) is fitted on the two models' fp32
bytes (Linear.fit); the loop around them and the other threads are the
worker loop's own cost.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.runtime.event_names import Event
from psgd.sim.host_profile import HostProfile, Linear

__all__ = ["WorkerLoopCosts", "measure_worker_loop", "PROBE_WIDTHS", "PROBE_DEVICE_MS"]

PROBE_WIDTHS = (256, 1024)  # the probe MLP's hidden widths (depth 2): about 0.34 and 4.6 MB of fp32
PROBE_DEVICE_MS = 5.0       # each probe step's stated device time, waited out as a sleep
PROBE_STEPS = 150
ROLE_TIMEOUT_S = 180


@dataclass(frozen=True)
class LoopPoint:
    """One probe model's figures, seconds per step: the worker's CPU by phase and what the parts charge."""
    nbytes: int
    step_s: float
    exchange_s: float
    loop_s: float          # the loop around the step and exchange, and every other thread
    compute_s: float       # the step's compute as the profile charges it (psgd.sim.op_count)
    parts_exchange_s: float


@dataclass(frozen=True)
class WorkerLoopCosts:
    step_extra: Optional[Linear]  # None: the profile's compute is not this host's (a cuda profile)
    exchange_extra: Linear
    loop_us: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(width: int, port: int) -> dict:
    return {"run": {"name": "profile-worker-loop", "seed": 0, "record": False},
            "cluster": {"servers": [f"127.0.0.1:{port}"], "workers": 1, "host": "127.0.0.1"},
            "consistency": {"mode": "asp"},
            "task": {"model": "mlp", "dataset": "digits", "batch_size": 32,
                     "model_args": {"hidden": width, "depth": 2}},
            "optimizer": {"name": "sgd", "lr": 1e-6}, "train": {"steps_per_worker": PROBE_STEPS, "max_time_s": 600},
            "eval": {"enabled": False}, "checkpoint": {"enabled": False},
            "workers": {"device": "cpu", "device_ms": PROBE_DEVICE_MS}}


def _run_roles(path: Path, out: Path) -> dict:
    """The shard and the worker, each its own process as `psgd launch` starts them; the worker's done event."""
    def role(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "psgd.cli", *args, str(path), "--run-dir", str(out / args[0])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = role("server", "--shard", "0")
    try:
        worker = role("worker", "--rank", "0")
        try:
            _, err = worker.communicate(timeout=ROLE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            raise RuntimeError(f"the worker-loop probe's worker did not finish within {ROLE_TIMEOUT_S} s") from None
        if worker.returncode != 0:
            last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the worker-loop probe's worker failed (exit {worker.returncode}): {last[0]}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    events = (out / "worker" / "events" / "worker-0.jsonl").read_text().splitlines()
    return next(e for e in map(json.loads, reversed(events)) if e.get("event") == Event.DONE)


def _point(width: int, profile: HostProfile, tmp: Path) -> LoopPoint:
    import yaml

    from psgd.config import load_config
    from psgd.sim.op_count import step_work
    from psgd.tasks import load_task
    path = tmp / f"w{width}.yaml"
    path.write_text(yaml.safe_dump(_config(width, _free_port())))
    cfg = load_config(path)
    task = load_task(cfg, str(tmp), splits=("train",))
    work = step_work(cfg, task)
    from psgd.tasks import build_model
    nbytes = 4 * sum(p.numel() for p in build_model(cfg, task).parameters())
    done = _run_roles(path, tmp / f"run-{width}")
    steps = done["steps"]
    main = done["step_cpu_s"] + done["exchange_cpu_s"] + done["loop_cpu_s"]
    return LoopPoint(nbytes, done["step_cpu_s"] / steps, done["exchange_cpu_s"] / steps,
                     (done["loop_cpu_s"] + max(done["cpu_s"] - main, 0.0)) / steps,
                     work.host_s(profile), profile.worker_exchange_s(nbytes))


def loop_costs(small: LoopPoint, large: LoopPoint, with_step: bool = True) -> WorkerLoopCosts:
    """What the two probe models' workers spent beyond their parts' charges, fitted on their bytes;
    `with_step` False: the step's is not kept (its compute was charged at another device's rates)."""
    beyond = lambda spent, parts: max(spent - parts, 0.0)  # noqa: E731
    step = Linear.fit(*[(p.nbytes, beyond(p.step_s, p.compute_s)) for p in (small, large)]) if with_step else None
    exchange = Linear.fit(*[(p.nbytes, beyond(p.exchange_s, p.parts_exchange_s)) for p in (small, large)])
    return WorkerLoopCosts(step, exchange, round(1e6 * (small.loop_s + large.loop_s) / 2, 3))


def measure_worker_loop(profile: HostProfile) -> WorkerLoopCosts:
    """Runs the probe (about 20 s: four role processes start); `profile`: the parts measured so far,
    whose charges are taken off (the probe's worker computes on this host's CPU: with a cuda profile,
    its step's extra is not kept). Raises RuntimeError when a role fails."""
    with tempfile.TemporaryDirectory(prefix="psgd-profile-worker-") as tmp:
        small, large = (_point(w, profile, Path(tmp)) for w in PROBE_WIDTHS)
        return loop_costs(small, large, with_step=profile.device == "cpu")
