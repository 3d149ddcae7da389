"""`psgd doctor`: what works on this machine, each answer from a real attempt.

Versions and devices are read; shared memory, CurveZMQ and network namespaces
are tried; on every device (the CPU, and each kind of GPU torch sees) a short
job runs end to end: BSP with plain SGD through real shards against the
all-reduce baseline (gloo on CPU, NCCL on CUDA), whose final parameters must
agree, and a timed push+pull round trip through the worker's staging buffers
(pinned on CUDA). Nothing here prints: the CLI reports the findings.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Optional

from psgd.config.modes import Mode
from psgd.runtime.host import usable_cores
from psgd.runtime.version import VERSION as psgd_version

__all__ = ["Status", "Finding", "environment", "system_checks", "device_checks", "available_devices",
           "DeviceUnavailable", "EXACT_ATOL", "bsp_matches_allreduce"]

# Final parameters of BSP+SGD and all-reduce after the doctor's steps may differ by float
# summation order only: the CPU tolerance is the e2e test's; GPU kernels reorder more.
EXACT_ATOL = {"cpu": 1e-4, "cuda": 1e-3}
EXACT_STEPS = 10
ROUND_TRIPS = 30


class Status(str, Enum):
    OK = "ok"
    FAILED = "failed"            # psgd cannot do this here: `psgd doctor` exits non-zero
    UNAVAILABLE = "unavailable"  # not on this machine; psgd works without it


@dataclass(frozen=True)
class Finding:
    name: str
    status: Status
    detail: str
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status.value, "detail": self.detail, "data": self.data}


class DeviceUnavailable(ValueError):
    """A device the caller asked for is not present."""


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict:
    """Versions and devices, read without starting anything."""
    import msgpack
    import torch
    import torch.distributed as dist

    from psgd.wire.transport import zmq_versions
    versions = {"psgd": psgd_version, "python": platform.python_version(), "torch": torch.__version__,
                **zmq_versions(),
                "msgpack": ".".join(map(str, msgpack.version)), "ray": _version("ray")}
    cuda = {"available": torch.cuda.is_available(), "runtime": torch.version.cuda,
            "devices": [], "driver": _nvidia_driver(), "nccl": None}
    if cuda["available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            cuda["devices"].append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                                    "capability": f"{p.major}.{p.minor}"})
        if dist.is_nccl_available():
            cuda["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return {"versions": versions, "cpu": {"cores": usable_cores(), "machine": platform.machine()}, "cuda": cuda}


def _nvidia_driver() -> Optional[str]:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


# ---- capabilities ----------------------------------------------------------------
def check_shared_memory() -> Finding:
    """A segment used as a same-host client and shard use it: the client writes a request,
    the shard maps the segment and copies it out, answers through the reply region, the client reads that."""
    import torch

    from psgd.wire.shm.attached import AttachedSegment
    from psgd.wire.shm.segment import Segment, ShmError
    payload = torch.arange(1 << 14, dtype=torch.float32)
    nbytes = payload.numel() * 4
    try:
        client = Segment.create(nbytes, nbytes)
    except ShmError as exc:
        return Finding("shared_memory", Status.UNAVAILABLE, f"{exc.reason}; same-host runs use TCP")
    try:
        gen, n = client.put_request(payload)
        shard = AttachedSegment.attach(client.name, client.token_hex, nbytes, nbytes)
        try:
            got = torch.empty_like(payload)
            if not shard.read_request(gen, got) or not torch.equal(got, payload):
                return Finding("shared_memory", Status.FAILED, "the shard read other bytes than were written")
            shard.put_reply(1, got * 2)
        finally:
            shard.close()
        back = client.reply_view(1, n)
        if back is None or not torch.equal(back.view(torch.float32), payload * 2):
            return Finding("shared_memory", Status.FAILED, "the client read another reply than the shard wrote")
    except ShmError as exc:
        return Finding("shared_memory", Status.FAILED, f"a segment was made but could not be used: {exc.reason}")
    finally:
        client.close()
    problem = _doorbell_problem()
    if problem:
        return Finding("shared_memory", Status.FAILED, f"segments work, but {problem}")
    return Finding("shared_memory", Status.OK, "a request and a reply crossed a sealed memfd segment and a doorbell")


def _doorbell_problem() -> str:
    """'' when a header rings a doorbell both ways (opened by name, as a shard opens a client's), else why not."""
    from psgd.wire.shm.doorbell import BellError, ClientBell, ShardBell
    try:
        client = ClientBell.create()
    except BellError as exc:
        return f"no doorbell can be made ({exc.reason}): headers go over ZeroMQ"
    try:
        shard = ShardBell.open(client.name)
    except BellError as exc:
        client.close()
        return f"a doorbell cannot be opened by name ({exc.reason}): headers go over ZeroMQ"
    try:
        client.settle()
        if not (client.ring(b"request") and shard.read() == [b"request"] and shard.ring(b"reply")
                and client.read() == [b"reply"]):
            return "a header rung through a doorbell did not arrive whole"
    finally:
        shard.close()
        client.close()
    return ""


def check_curve() -> Finding:
    """An encrypted, authenticated exchange on loopback, as security.curve sets it up."""
    from psgd.wire.transport import curve_round_trip
    problem = curve_round_trip()
    if problem.startswith("libzmq was built without"):
        return Finding("curvezmq", Status.UNAVAILABLE, f"{problem}: security.curve cannot be used")
    return Finding("curvezmq", Status.FAILED if problem else Status.OK, problem or "encrypted round trip on loopback")


def check_namespaces() -> Finding:
    """Network namespaces are what the multi-host tests and `bench comm --cross-host` use."""
    if shutil.which("ip") is None:
        return Finding("network_namespaces", Status.UNAVAILABLE, "no `ip` command (iproute2)")
    name = f"psgd-doctor-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return Finding("network_namespaces", Status.UNAVAILABLE,
                       f"cannot create one ({made.stderr.strip() or 'ip netns add failed'}): "
                       "cross-host tests and bench comm --cross-host skip")
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return Finding("network_namespaces", Status.OK, "can create and delete a namespace")


def system_checks() -> list[Finding]:
    return [check_temp_dir(), check_shared_memory(), check_curve(), check_namespaces()]


def _temp_dir_problem() -> Optional[str]:
    """Why temporary files cannot go where the user wants them (None: they can). The
    runs the doctor makes, torch and Ray write under the temporary directory."""
    wanted = os.environ.get("TMPDIR")
    try:
        with tempfile.TemporaryDirectory(prefix="psgd-doctor-", dir=wanted or None):
            pass
    except OSError as exc:
        where = f"TMPDIR={wanted}" if wanted else "no TMPDIR set"
        return f"{exc.strerror or exc} ({where}): set TMPDIR to a writable directory"
    return None


def check_temp_dir() -> Finding:
    problem = _temp_dir_problem()
    if problem:
        return Finding("temporary_directory", Status.FAILED, problem)
    return Finding("temporary_directory", Status.OK, f"{tempfile.gettempdir()} is writable")


# ---- end-to-end on each device -------------------------------------------------------
def available_devices() -> list[str]:
    import torch
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _job_config(device: str, mode: str, workers: int):
    from psgd.config import load_config
    return load_config({
        "run": {"name": f"doctor-{device}-{mode}", "seed": 0},
        "cluster": {"servers": 2, "workers": workers, "timeout_s": 10.0},
        "consistency": {"mode": mode},
        "task": {"model": "mlp", "dataset": "digits", "batch_size": 32},
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0},
        "train": {"steps_per_worker": EXACT_STEPS, "max_time_s": 120, "target_accuracy": 0.99},
        "eval": {"every_s": 5.0},
        "workers": {"device": device},
        "checkpoint": {"enabled": False},
    })


def check_exactness(device: str, workdir: Path, child_main: Optional[Callable] = None) -> Finding:
    """BSP with plain SGD and all-reduce, same seed: the same algorithm, so the same parameters."""
    import torch
    # NCCL refuses two ranks on one GPU: on CUDA, one worker per device.
    workers = 2 if device == "cpu" else min(2, torch.cuda.device_count())
    return bsp_matches_allreduce(lambda mode: _job_config(device, mode, workers), workdir, child_main)


def bsp_matches_allreduce(job: Callable[[Mode], Any], workdir: Path, child_main: Optional[Callable] = None) -> Finding:
    """Launches `job(Mode.BSP)` and `job(Mode.ALLREDUCE)` (configs alike but for the mode, with
    plain SGD) under `workdir` and compares their final parameters at EXACT_ATOL of their device."""
    import torch

    from psgd.orchestrate.supervisor import Supervisor
    from psgd.runtime.devices import dist_backend
    from psgd.workers.model_sync import select_device
    configs = {mode: job(mode) for mode in (Mode.BSP, Mode.ALLREDUCE)}
    cfg = configs[Mode.BSP]
    # Named devices are taken as named: asking CUDA here would start it in a process that forks the runs.
    device = cfg.workers.device if cfg.workers.device != "auto" else select_device("auto").type
    name = f"{device}: bsp = allreduce"
    models, updates = {}, {}
    for mode, mode_cfg in configs.items():
        run_dir = workdir / f"{device}-{mode}"
        run_dir.mkdir(parents=True)
        result = Supervisor(mode_cfg, run_dir, child_main=child_main).run()
        if result.code != 0:
            return Finding(name, Status.FAILED, f"the {mode} run failed: {result.reason} (logs in {run_dir / 'logs'})")
        models[mode] = torch.load(run_dir / "model.pt", weights_only=True)
        updates[mode] = json.loads((run_dir / "summary.json").read_text())["total_updates"]
    if updates[Mode.BSP] != updates[Mode.ALLREDUCE]:  # a run that stopped early (a target reached) compares nothing
        return Finding(name, Status.FAILED, f"the runs applied {updates[Mode.BSP]} (bsp) and "
                       f"{updates[Mode.ALLREDUCE]} (allreduce) updates: set steps the target does not cut short")
    diff = max((models[Mode.BSP][k] - models[Mode.ALLREDUCE][k]).abs().max().item() for k in models[Mode.BSP])
    backend = dist_backend(device)
    workers, steps = cfg.cluster.workers, cfg.train.steps_per_worker
    data = {"workers": workers, "steps": steps, "updates": updates[Mode.BSP], "max_abs_diff": diff, "atol": EXACT_ATOL[device],
            "backend": backend, "model": cfg.task.model, "dataset": cfg.task.dataset}
    if diff > EXACT_ATOL[device]:
        return Finding(name, Status.FAILED, f"final parameters differ by {diff:.3g} > {EXACT_ATOL[device]:g} "
                       f"after {steps} steps of {workers} workers ({backend})", data)
    return Finding(name, Status.OK, f"{workers} workers x {steps} steps, max |difference| {diff:.2g} "
                   f"<= {EXACT_ATOL[device]:g} ({backend})", data)


def check_round_trip(device: str) -> Finding:
    """Push+pull round trips of the MLP's gradients through a shard on loopback, staged through
    the worker's host buffers (pinned on CUDA): the path every training step takes."""
    import torch

    from psgd.core.sharding import layout_for_module
    from psgd.servers.shard import ShardServer
    from psgd.tasks import build_model, load_task
    from psgd.workers.optimizer import Optimizer
    cfg = _job_config(device, Mode.ASP, 1)
    model = build_model(cfg, load_task(cfg, None, splits=("train",))).to(device)
    layout = layout_for_module(model, cfg.cluster.num_servers)
    params = layout.flatten([p.detach().cpu() for p in model.parameters()])
    stop = threading.Event()
    servers = [ShardServer(cfg, i, "127.0.0.1:0", p, layout.fingerprint) for i, p in enumerate(params)]
    threads = [threading.Thread(target=s.serve, args=(stop,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    name = f"{device}: round trip"
    try:
        addresses = [s.address.replace("tcp://", "") for s in servers]
        cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, servers=addresses))
        opt = Optimizer(model, cfg, rank=0)
        try:
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            times = []
            for _ in range(ROUND_TRIPS):
                t0 = time.perf_counter()
                opt.step()
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        finally:
            opt.close()
    except Exception as exc:  # noqa: BLE001 - any failure of the data path is the finding
        return Finding(name, Status.FAILED, f"{type(exc).__name__}: {exc}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
    times.sort()
    median_ms = 1e3 * times[len(times) // 2]
    pinned = bool(opt.sync.host_grads[0].is_pinned()) if device == "cuda" else False
    nbytes = 4 * sum(layout.shard_sizes)
    return Finding(name, Status.OK, f"median {median_ms:.2f} ms per push+pull of {nbytes / 1024:.0f} KiB over "
                   f"{len(servers)} shards ({'pinned' if pinned else 'host'} staging)",
                   {"median_ms": median_ms, "bytes": nbytes, "pinned": pinned, "round_trips": ROUND_TRIPS})


def device_checks(device: str, child_main: Optional[Callable] = None) -> list[Finding]:
    if device not in available_devices():
        raise DeviceUnavailable(f"{device}: torch sees no such device here")
    problem = _temp_dir_problem()
    if problem:
        return [Finding(f"{device}: bsp = allreduce", Status.FAILED, f"its runs need a temporary directory: {problem}"),
                check_round_trip(device)]
    with tempfile.TemporaryDirectory(prefix="psgd-doctor-") as tmp:
        return [check_exactness(device, Path(tmp), child_main), check_round_trip(device)]


def summarise(findings: list[Finding]) -> dict[str, Any]:
    failed = [f.name for f in findings if f.status is Status.FAILED]
    return {"ok": not failed, "failed": failed}
