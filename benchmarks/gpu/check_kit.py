"""What the GPU script's checks share (checks.py, codecs_check.py): where the configs are, what a
dry run says it left out, and how a check runs psgd, judges a run and writes its JSON."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import preloaded  # beside this script

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
MNIST1D = ROOT / "benchmarks" / "convergence" / "mnist1d.yaml"

DRY_SKIPS = {
    "install": "installing the carried wheels (the dry run uses the psgd installed here)",
    "doctor": "doctor's cuda checks (bsp = NCCL all-reduce, the pinned round trip): the same command ran and "
              "reported cuda missing",
    "quickstart": "the quickstart on cuda and bsp = NCCL all-reduce: ran on cpu (gloo) at 20 and 10 steps",
    "comm": "the pinned path on cuda at 1 MB and 64 MB: the same measurement ran from cpu memory at 64 KB",
    "overlap": "overlap on cuda at 16 MB: ran on cpu at 256 KB, one short run",
    "mnist1d": "the MNIST-1D CNN on cuda with 4 workers: ran on cpu, 2 workers, 16 channels, 1 s a mode",
    "sim-batched": "the simulator's batched gradients on cuda against the cpu: cpu against cpu, 4 workers, 16 channels",
    "sim-scale": "256 simulated MNIST-1D CNN workers with their gradients on cuda against 16 on the cpu: "
                 "8 against 2 on the cpu, 16 channels, 3 steps each",
    "codecs": "every push codec encoding cuda tensors against the cpu, 4M elements timed, and the quickstart on "
              "cuda with int8 pushes and replies: cpu against cpu at 64K elements, no quickstart run",
}


def psgd(work: Path, *args: str) -> subprocess.CompletedProcess:
    """`psgd ARGS` run from `work`: from the repository root, `python -m` would import the
    psgd/ source folder, which is not the installed package (servers/ and workers/ map into it).
    In a dry run the same command is forked from run.sh's preloaded interpreter (preloaded.py)."""
    argv = ["-m", "psgd.cli", *args]
    if os.environ.get(preloaded.ENV):
        return preloaded.capture(os.environ[preloaded.ENV], argv, work)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=work)


def command_line(*args: str) -> str:
    return "psgd " + " ".join(args)


def write(out: Path, name: str, doc: dict) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    if doc["status"] == "failed":
        print(f"{name}: {doc['detail']}", file=sys.stderr)
        return 1
    print(f"{name}: {doc['detail']}")
    return 0


def result(check: str, device: str, ok: bool, detail: str, commands: list[str], **data) -> dict:
    doc = {"check": check, "device": device, "status": "ok" if ok else "failed", "detail": detail,
           "commands": commands, **data}
    if device != "cuda":
        doc["skipped"] = DRY_SKIPS[check]
    return doc


def failed_run(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return f"exit {proc.returncode}: {lines[-1] if lines else 'no output'}"


def keep_log(work: Path, name: str, proc: subprocess.CompletedProcess) -> None:
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{name}.log").write_text(f"$ {' '.join(proc.args)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")


def worker_devices(run_dir: Path) -> list[str]:
    """The device each worker reported when ready (its READY event)."""
    from psgd.config.modes import Role
    from psgd.runtime.event_names import Event
    from psgd.runtime.events import read_events
    return sorted({e.get("device", "?") for e in read_events(run_dir / "metrics.jsonl")
                   if e.get("event") == Event.READY and Role(e.get("role")).trains})


def num(x, spec: str = ".3f", unit: str = "") -> str:
    """A figure for a detail line; 'none' where the run has none (no evaluation, target not reached)."""
    return "none" if x is None else format(x, spec) + unit


def on_device(devices: list[str], device: str) -> bool:
    """Workers reported, and every one on `device` ('cuda' covers 'cuda:1')."""
    return bool(devices) and all(d.split(":")[0] == device for d in devices)


def launch(work: Path, name: str, config: Path, sets: list[str],
           on: Optional[str] = None) -> tuple[subprocess.CompletedProcess, Path, dict]:
    run_dir = work / name
    args = ["launch", str(config), "--out", str(run_dir), "--quiet", *(["--on", on] if on else [])]
    for s in sets:
        args += ["--set", s]
    proc = psgd(work, *args)
    keep_log(work, name, proc)
    summary = run_dir / "summary.json"
    return proc, run_dir, json.loads(summary.read_text()) if summary.is_file() else {}


def gpu_count() -> int:
    """GPUs torch sees, asked in a child: CUDA started in this process would not survive the
    fork of the runs it launches."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, check=True)
    return int(probe.stdout)


SUMMARY_KEYS = ("mode", "workers", "servers", "status", "wall_time_s", "total_updates", "updates_per_s",
                "final_test_accuracy", "time_to_target_s", "staleness_mean", "staleness_max")


def median_s(call, repeats: int, sync) -> float:
    """Median seconds of `call` over `repeats`, after one warm-up (kernels chosen, memory
    allocated); `sync` waits for the device's queued work before each clock reading."""
    call()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
