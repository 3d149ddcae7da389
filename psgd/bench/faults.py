"""`psgd bench faults`: the same job run fault-free and under a fault storm, side by side.

Each seed runs twice on the real local launcher (`psgd launch`, a child process
of the bench): once fault-free and once with one process of the target role
SIGKILLed every `every_s` seconds of training (the workers or the shards in
turn, pids read from the run directory's processes.json, as an operator or the
kernel's OOM killer would; a pid is killed only while it is still the launcher's child). The launcher restarts what died; both runs get the
same supervision.max_restarts, enough for the planned kills. `--on sim` runs the
same job on the virtual cluster instead, the storm made by its failure model
(psgd.sim.faults, `sim.faults`: the same plan, the launcher's restart rules) at the
same simulated times, one run after the other in this process. The two runs of a
seed run side by side (the same machine load on both at every moment; the
storm's idle seconds leave the fault-free run a little more CPU, which can only
lower the measured ratio) or one after the other, the first alternating with
the seed (no interference, but a drifting load weighs on them unequally). The arithmetic is in
fault_metrics, the statistics in stats, the report in fault_report.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable, Optional

from psgd.bench.fault_metrics import (
    Accounting,
    FaultTarget,
    Kill,
    Recovery,
    account,
    goodput,
    kill_schedule,
    recoveries,
    restarts_needed,
    useful_updates,
)
from psgd.config import Config, load_config
from psgd.config.modes import Role
from psgd.runtime.events import read_events
from psgd.runtime.lifeline import PROCESSES_FILE
from psgd.runtime.role import START_FILE

__all__ = ["FaultRun", "FaultBench", "Pairing", "Where", "plan_overrides", "run_fault_bench", "FAULT_FREE", "FAULTY"]

FAULT_FREE = "fault-free"
FAULTY = "faults"
# Beyond train.max_time_s, how long a launch may take (start-up, the final evaluation, stopping).
LAUNCH_SLACK_S = 300.0
POLL_S = 0.02


@dataclass
class FaultRun:
    """One launch of the bench, read back from its run directory."""
    label: str                      # FAULT_FREE or FAULTY
    seed: int
    run_dir: Path
    code: int                       # psgd launch's exit status
    reason: str                     # its last line of output
    summary: dict
    kills: list[Kill]
    useful_updates: int
    goodput: float                  # useful updates per second
    accounting: list[Accounting]
    recoveries: list[Recovery]
    load_avg: tuple[float, float]   # 1-minute load average when it started and when it ended

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.summary.get("status") == "ok"

    @property
    def wall_time_s(self) -> float:
        return float(self.summary.get("wall_time_s") or 0.0)


@dataclass
class FaultBench:
    config: Config                  # the base config (the seed of each run aside)
    target: FaultTarget
    every_s: float
    planned: list[tuple[float, int]]
    overrides: list[str]            # what the bench set on top of the user's overrides
    out_dir: Path
    pairing: "Pairing"
    runs: list[FaultRun] = field(default_factory=list)
    on: "Where" = None              # the real local launcher or the virtual cluster (set in __post_init__)

    def __post_init__(self):
        self.on = Where.LOCAL if self.on is None else self.on

    @property
    def simulated(self) -> bool:
        return self.on is Where.SIM


class Where(str, Enum):
    LOCAL = "local"  # real processes, SIGKILLed by the bench
    SIM = "sim"      # the virtual cluster, killed by its failure model (psgd.sim.faults)

    def __str__(self) -> str:
        return self.value


def plan_overrides(cfg: Config, target: FaultTarget, every_s: float,
                   on: Where = Where.LOCAL) -> tuple[list[tuple[float, int]], list[str]]:
    """The planned kills and the overrides both runs of a seed get. Raises ValueError
    for a job that cannot be put under this storm."""
    if not cfg.consistency.mode.on_servers:
        raise ValueError(f"consistency.mode={cfg.consistency.mode}: all-reduce ranks cannot rejoin their "
                         "process group, so a killed one is not restarted; use bsp, ssp or asp")
    count = cfg.cluster.workers if target is FaultTarget.WORKERS else cfg.cluster.num_servers
    plan = kill_schedule(every_s, cfg.train.max_time_s, count, cfg.supervision.backoff_s)
    if not plan:
        raise ValueError(f"--kill-every-s {every_s:g}: no kill fits in train.max_time_s={cfg.train.max_time_s:g}")
    # The storm is sent to processes on this machine (the local launcher runs them), or made by
    # the virtual cluster's failure model.
    return plan, [f"cluster.launcher={on}",
                  f"supervision.max_restarts={max(cfg.supervision.max_restarts, restarts_needed(plan))}"]


def storm_overrides(target: FaultTarget, every_s: float) -> list[str]:
    """What the storm run of a simulated pair sets on top: the failure model's kills."""
    return [f"sim.faults.kill_every_s={every_s!r}", f"sim.faults.target={target}"]


def _launch_cmd(config_path: str, run_dir: Path, sets: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "psgd.cli", "launch", str(Path(config_path).resolve()), "--out",
           str(run_dir.resolve()), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _training_t0(run_dir: Path) -> Optional[float]:
    try:
        return float(json.loads((run_dir / START_FILE).read_text())["t0"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _pid(run_dir: Path, role: Role, index: int) -> Optional[int]:
    try:
        entries = json.loads((run_dir / PROCESSES_FILE).read_text())
    except (OSError, ValueError):
        return None
    return next((int(e["pid"]) for e in entries if e.get("role") == role and e.get("index") == index), None)


def _storm(proc: subprocess.Popen, run_dir: Path, plan: list[tuple[float, int]], role: Role) -> list[Kill]:
    """SIGKILL the planned processes at their run times while the launch lives."""
    kills: list[Kill] = []
    t0 = None
    while t0 is None and proc.poll() is None:
        t0 = _training_t0(run_dir)
        time.sleep(POLL_S)
    if t0 is None:  # the launch ended before training started: nothing to kill
        return kills
    for at, index in plan:
        while proc.poll() is None and time.time() < t0 + at:
            time.sleep(POLL_S)
        if proc.poll() is not None:
            break
        pid = _pid(run_dir, role, index)
        # Not running now (a restart still pending), or the pid is no longer the run's: not made.
        if pid is None or not _kill_child(pid, proc.pid):
            continue
        kills.append(Kill(round(time.time() - t0, 4), role, index, pid))
    return kills


def _kill_child(pid: int, parent: int) -> bool:
    """SIGKILL `pid` if it is a live child of `parent` (the launcher the bench started):
    processes.json may still list a process that has exited, and the kernel may have given
    its number to another. Checked and signalled through one pidfd where Linux has them, so
    the process checked is the one killed. False: nothing was killed."""
    try:
        fd: Optional[int] = os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:  # no pidfd here, or the process is gone
        if isinstance(exc, ProcessLookupError):
            return False
        fd = None
    try:
        if _live_parent(pid) != parent:
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _live_parent(pid: int) -> Optional[int]:
    """The parent pid of a process that has not exited (None: gone, or exited and unreaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return None if state in ("Z", "X") else int(ppid)


@dataclass
class _Launch:
    proc: subprocess.Popen
    log: Path
    load_start: float


def _start(config_path: str, sets: list[str], run_dir: Path) -> _Launch:
    log = run_dir.parent / f"{run_dir.name}.log"
    load = os.getloadavg()[0]
    with open(log, "w") as out:
        proc = subprocess.Popen(_launch_cmd(config_path, run_dir, sets), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(Path(config_path).resolve().parent))
    return _Launch(proc, log, load)


def _finish(launch: _Launch, timeout_s: float) -> tuple[int, str]:
    try:
        launch.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(launch.proc)
        return -9, f"psgd launch did not finish in {timeout_s:.0f} s and was killed"
    lines = [ln for ln in launch.log.read_text().splitlines() if ln.strip()]
    return launch.proc.returncode, (lines[-1] if lines else "")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _read_run(label: str, seed: int, run_dir: Path, code: int, reason: str, kills: list[Kill],
              cfg: Config, load_avg: tuple[float, float]) -> FaultRun:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    events = read_events(run_dir / "metrics.jsonl")
    wall = float(summary.get("wall_time_s") or 0.0)
    return FaultRun(label, seed, run_dir, code, reason, summary, kills, useful_updates(events),
                    goodput(events, wall) if wall > 0 else 0.0, account(events, cfg.cluster.workers),
                    recoveries(events, kills, cfg.cluster.workers, cfg.cluster.num_servers), load_avg)


class Pairing(str, Enum):
    SIDE_BY_SIDE = "side-by-side"  # a seed's two runs at once: the same load on both, each the other's load too
    ALTERNATE = "alternate"        # one after the other, the first alternating with the seed

    def __str__(self) -> str:
        return self.value


def _simulated(label: str, seed: int, cfg: Config, run_dir: Path) -> FaultRun:
    """One run on the virtual cluster, in this process; its kills are the failure model's."""
    from psgd.orchestrate.launchers.sim import SimLauncher  # torch and the task: only when simulating
    load = os.getloadavg()[0]
    run_dir.mkdir(parents=True)
    result = SimLauncher(cfg, run_dir).run()
    kills = [Kill(float(k["t"]), Role(k["role"]), int(k["index"]), 0)
             for k in (result.summary or {}).get("sim_kills", [])]
    return _read_run(label, seed, run_dir, result.code, result.reason or "ok", kills, cfg,
                     (load, os.getloadavg()[0]))


def run_fault_bench(config_path: str, overrides: list[str], target: FaultTarget, every_s: float, seeds: int,
                    out_dir: Path, pairing: Pairing = Pairing.SIDE_BY_SIDE,
                    on_run: Callable[[str], None] = lambda msg: None, on: Where = Where.LOCAL) -> FaultBench:
    """Every seed fault-free and under the storm. Blocks; a failed launch is kept in the
    result (its code and reason), not raised. Raises ConfigError or ValueError before
    anything runs when the config or the storm cannot be run."""
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    base = load_config(config_path, overrides)
    plan, extra = plan_overrides(base, target, every_s, on)
    bench = FaultBench(base, target, every_s, plan, extra, Path(out_dir), pairing, on=on)
    if on is Where.SIM:
        from psgd.orchestrate.launchers.sim import SimLauncher
        SimLauncher.check(load_config(config_path, [*overrides, *extra, *storm_overrides(target, every_s)]))
        for k in range(seeds):
            seed = base.run.seed + k
            for label, more in ((FAULT_FREE, []), (FAULTY, storm_overrides(target, every_s))):
                cfg = load_config(config_path, [*overrides, *extra, *more, f"run.seed={seed}"])
                run_dir = bench.out_dir / "runs" / f"{label}-seed{seed}"
                if run_dir.exists():
                    raise ValueError(f"{run_dir} already exists: give a fresh --out")
                on_run(f"{label} seed {seed} (simulated) -> {run_dir}")
                run = _simulated(label, seed, cfg, run_dir)
                bench.runs.append(run)
                on_run(f"    {label}: {run.reason}" if not run.ok else
                       f"    {label}: {run.useful_updates} useful updates in {run.wall_time_s:.1f} simulated s = "
                       f"{run.goodput:.1f}/s, {len(run.kills)} kills, accuracy {run.summary.get('final_test_accuracy')}")
        return bench
    timeout = base.train.max_time_s + LAUNCH_SLACK_S
    for k in range(seeds):
        seed = base.run.seed + k
        sets = [*overrides, *extra, f"run.seed={seed}"]
        cfg = load_config(config_path, sets)
        dirs = {label: bench.out_dir / "runs" / f"{label}-seed{seed}" for label in (FAULT_FREE, FAULTY)}
        for d in dirs.values():
            if d.exists():
                raise ValueError(f"{d} already exists: give a fresh --out")
            d.parent.mkdir(parents=True, exist_ok=True)
        order = [FAULT_FREE, FAULTY] if k % 2 == 0 else [FAULTY, FAULT_FREE]
        groups = [order] if pairing is Pairing.SIDE_BY_SIDE else [[label] for label in order]
        for group in groups:
            on_run(" and ".join(f"{label} seed {seed} -> {dirs[label]}" for label in group))
            launches = {label: _start(config_path, sets, dirs[label]) for label in group}
            kills: list[Kill] = []
            try:
                if FAULTY in launches:
                    kills = _storm(launches[FAULTY].proc, dirs[FAULTY], plan, target.role)
                ended = {label: _finish(launch, timeout) for label, launch in launches.items()}
            except BaseException:
                for launch in launches.values():
                    _kill_group(launch.proc)
                raise
            for label in group:
                code, reason = ended[label]
                run = _read_run(label, seed, dirs[label], code, reason, kills if label == FAULTY else [], cfg,
                                (launches[label].load_start, os.getloadavg()[0]))
                # The push logs of a run no one will resume reach hundreds of MB.
                shutil.rmtree(dirs[label] / "checkpoints", ignore_errors=True)
                bench.runs.append(run)
                on_run(f"    {label}: {reason}" if not run.ok else
                       f"    {label}: {run.useful_updates} useful updates in {run.wall_time_s:.1f} s = "
                       f"{run.goodput:.1f}/s, {len(run.kills)} kills, accuracy {run.summary.get('final_test_accuracy')}")
    return bench
