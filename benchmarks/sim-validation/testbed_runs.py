"""One cell of the validation matrix, run for real or on the simulator.

Real runs use the testbed: every worker waits out its stated device time
(workers.device_ms), and on a shaped network every shard, worker and the
evaluator is a host of its own behind a token-bucket link
(psgd.bench.shaped_net), started as the launcher starts its children (each
role with --supervised; one start signal once every process is ready) and
collected with `psgd collect`. Loopback runs are plain `psgd launch`.
Simulated runs are `psgd launch --on sim` on the same file with the same
overrides, plus the stated links: nothing is calibrated.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from psgd.bench.shaped_net import LinkShape, ShapedStar
from psgd.core.histogram import Histogram

PSGD = [sys.executable, "-m", "psgd.cli"]
# Once a real run trains, its processes get this scheduling priority (the nice value of
# their session's autogroup: with autogroups on, as here, a process's own nice value only
# orders it within its session, so a plain `nice` changes nothing against other jobs).
# A worker whose device wait ends, or a shard a message wakes, then gets a core at once,
# as on a host of its own; they sleep most of the time, so this takes little from the
# other jobs. Set after every process is ready: their start (importing torch) keeps the
# machine's ordinary share. 0: no priority (a run at the machine's mercy).
NICE = -20
RUN_TIMEOUT_S = 300  # one run, start to collect; a run past it is a failure, not a hang
PORT = 7100


@dataclass(frozen=True)
class Cell:
    workers: int
    mode: str      # a label of MODES
    case: str      # a label of CASES
    net: str       # "loopback" or "shaped"

    @property
    def name(self) -> str:
        return f"w{self.workers}-{self.mode.replace(':', '')}-{self.case}-{self.net}"

    @property
    def group(self) -> tuple:
        """The cells whose modes are compared with each other."""
        return (self.workers, self.case, self.net)


# Each mode as config overrides; local:4 is GEO-SGD style local updates (4 inner steps per push, asp);
# asp+fp16 pushes fp16 gradients (the codec factor: half the bytes up, an encode and a decode);
# asp+2shards splits the model over two shards (the shards factor; loopback only).
MODES = {
    "bsp": ["consistency.mode=bsp"],
    "ssp:2": ["consistency.mode=ssp", "consistency.staleness=2"],
    "asp": ["consistency.mode=asp"],
    "bsp+backup:1": ["consistency.mode=bsp", "consistency.backup_workers=1"],
    "local:4": ["consistency.mode=asp", "local.steps=4"],
    "asp+fp16": ["consistency.mode=asp", "wire.compression=fp16"],
    "asp+2shards": ["consistency.mode=asp", "cluster.servers=2"],
}


CASES_ALL = ("none", "straggler", "delay")


def case_overrides(case: str, workers: int) -> list[str]:
    if case == "none":
        return []
    if case == "straggler":  # the last rank runs 4x slower
        return [f"workers.slowdown={{{workers - 1}: 4.0}}"]
    if case == "delay":      # every step of every rank, an exponential delay of mean 1x its device time
        return ["workers.delay={dist: exponential, mean: 1.0}"]
    raise ValueError(f"unknown case {case!r}")


def overrides(cell: Cell, seed: int) -> list[str]:
    return [f"cluster.workers={cell.workers}", f"run.seed={seed}", *MODES[cell.mode],
            *case_overrides(cell.case, cell.workers)]


@dataclass(frozen=True)
class HostCost:
    """This host's software cost per message (Python, msgpack, ZeroMQ, the shard's
    request handling), fitted by `psgd sim calibrate` on a run outside the matrix:
    the one calibrated part of what the simulator is given."""
    request_us: float   # a shard's fixed cost per request
    latency_us: float   # per link, one way: a round trip crosses four

    def overrides(self) -> list[str]:
        return [f"sim.request_us={self.request_us!r}", f"sim.latency_us={self.latency_us!r}"]


def sim_overrides(cell: Cell, shape: LinkShape, host: Optional[HostCost] = None) -> list[str]:
    """The links as stated: on the shaped net every link runs at the shape's rate;
    `host`: the host's per-message cost (else the sim's defaults stand for it). A shaped
    link's stated delay adds to the host's latency."""
    stated = host.overrides() if host else []
    if cell.net == "loopback":
        return stated
    stated = [o for o in stated if not o.startswith("sim.latency_us=")]
    latency_us = (host.latency_us if host else 0.0) + shape.latency_ms * 1e3
    stated.append(f"sim.bandwidth_gbps={shape.rate_mbit / 1e3!r}")
    return stated + ([f"sim.latency_us={latency_us!r}"] if latency_us else [])


def _sets(items: list[str]) -> list[str]:
    return [a for o in items for a in ("--set", o)]


def run_sim(config: Path, cell: Cell, seed: int, shape: LinkShape, out: Path,
            host: Optional[HostCost] = None) -> Path:
    """`psgd launch --on sim`, in this process (a simulated run starts no process)."""
    from psgd.cli import main
    argv = ["launch", str(config), "--on", "sim", "--out", str(out), "--quiet",
            *_sets(overrides(cell, seed) + sim_overrides(cell, shape, host))]
    code = main(argv)
    if code != 0:
        raise RuntimeError(f"psgd {' '.join(argv)} exited {code}")
    return out


def prioritize(pids: list[int]) -> None:
    """Gives each pid's session (autogroup) the niceness NICE; each must lead its own session."""
    if NICE:
        for pid in pids:
            try:
                Path(f"/proc/{pid}/autogroup").write_text(str(NICE))
            except ProcessLookupError:
                pass  # gone already: nothing to schedule


def _launch(cmd: list[str], out: Path) -> None:
    """`psgd launch` in a session of its own, prioritized once its start signal is written."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while proc.poll() is None and not (out / "start.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    prioritize([proc.pid])
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{' '.join(cmd)}: still running after {RUN_TIMEOUT_S} s") from None
    _check(subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), cmd)


def run_real(config: Path, cell: Cell, seed: int, shape: LinkShape, out: Path, extra: tuple[str, ...] = ()) -> Path:
    """`extra`: overrides after the cell's."""
    if cell.net == "loopback":
        _launch([*PSGD, "launch", str(config), "--out", str(out), "--quiet", *_sets(overrides(cell, seed) + list(extra))],
                out)
        return out
    return _run_shaped(config, cell, seed, shape, out, extra)


HOST_COST_WORKERS = 1   # no matrix cell has one worker
HOST_COST_SEED = 100    # nor these seeds (100, 101, ...)
HOST_COST_STEPS = 200   # round trips to fit from


def host_cost_cell(net: str) -> Cell:
    return Cell(HOST_COST_WORKERS, "asp", "none", net)


def measure_host_cost(config: Path, out: Path, net: str, shape: LinkShape,
                      seed: int = HOST_COST_SEED) -> tuple[HostCost, dict]:
    """One real run outside the matrix (a single ASP worker: no barrier, no other
    worker's messages) on `net`, calibrated by `psgd sim calibrate` given the stated
    links (on the shaped net, the transfers at the shape's rate are not the host's);
    of its fit only the per-message keys are kept (the compute and its variability
    are stated by testbed.yaml). Each net has its own: loopback runs pass parameters
    through shared memory, shaped ones through TCP. calibrate fits latency_us to the
    mean round trip; here it is moved to the median one: the matrix compares medians,
    and the mean carries the tail of round trips that waited for a core behind other
    jobs, which the simulator's fixed costs cannot hold. Returns them and the
    calibration's evidence."""
    from psgd.sim.calibrate import calibrate
    cell = host_cost_cell(net)
    run_real(config, cell, seed, shape, out, (f"train.steps_per_worker={HOST_COST_STEPS}",
                                              *sim_overrides(cell, shape)))
    fit = calibrate(out)
    round_trips = _pull_waits(out)
    median_s = statistics.median(round_trips)
    mean_s = fit.evidence["unwaited_comm_ms_mean"] / 1e3
    latency_us = round(max(0.0, fit.sim["latency_us"] + (median_s - mean_s) / 4 * 1e6), 3)
    evidence = {**fit.evidence, "unwaited_comm_ms_median": round(median_s * 1e3, 6),
                "calibrate_latency_us_from_mean": fit.sim["latency_us"], "calibrate_fit": fit.sim,
                "fitted": {"request_us": fit.sim["request_us"], "latency_us": latency_us}}
    return HostCost(fit.sim["request_us"], latency_us), evidence


def _check(res: subprocess.CompletedProcess, cmd: list[str]) -> None:
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}: {(res.stderr or res.stdout).strip()[-400:]}")


def _run_shaped(config: Path, cell: Cell, seed: int, shape: LinkShape, out: Path, extra: tuple[str, ...] = ()) -> Path:
    from psgd.config import dump_config, load_config
    given = overrides(cell, seed) + list(extra)
    shards = load_config(config, given).cluster.num_servers
    hosts = [*[f"shard{s}" for s in range(shards)], "evaluator", *[f"worker{r}" for r in range(cell.workers)]]
    out.mkdir(parents=True)
    with ShapedStar(hosts, shape) as net:
        servers = ",".join(f"{net.ip(f'shard{s}')}:{PORT}" for s in range(shards))
        cfg = load_config(config, given + [f"cluster.servers=[{servers}]", "wire.shared_memory=off"])
        cfg_path = out / "config.yaml"
        cfg_path.write_text(dump_config(cfg))
        def role(host: str, *args: str) -> subprocess.Popen:  # each in a session of its own (prioritize)
            return subprocess.Popen(net.command(host, [*PSGD, *args, "--run-dir", str(out), "--supervised"]),
                                    start_new_session=True)
        procs = [*(role(f"shard{s}", "server", str(cfg_path), "--shard", str(s)) for s in range(shards)),
                 role("evaluator", "evaluator", str(cfg_path))]
        workers = [role(f"worker{r}", "worker", str(cfg_path), "--rank", str(r)) for r in range(cell.workers)]
        try:
            _start_when_ready(out, len(procs) + cell.workers, [*procs, *workers])
            deadline = time.monotonic() + RUN_TIMEOUT_S
            codes = [w.wait(timeout=max(1.0, deadline - time.monotonic())) for w in workers]
            if codes != [0] * cell.workers:
                raise RuntimeError(f"{cell.name} seed {seed}: worker exit codes {codes}; events in {out}")
            for p in reversed(procs):  # the evaluator scores the final parameters as it stops, then the shards
                p.terminate()
                p.wait(timeout=60)
        finally:
            for p in [*workers, *procs]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    _check(subprocess.run([*PSGD, "collect", str(out)], capture_output=True, text=True, timeout=120), ["collect"])
    return out


def _start_when_ready(run_dir: Path, expected: int, procs: list, timeout_s: float = 120.0) -> None:
    """The launcher's start signal: once every process has said ready, one t0 for all."""
    deadline = time.monotonic() + timeout_s
    while _ready(run_dir) < expected:
        dead = [p.args[-6:] for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"not every process became ready in {run_dir} (exited: {dead})")
        time.sleep(0.05)
    prioritize([p.pid for p in procs])
    tmp = run_dir / "start.json.tmp"
    tmp.write_text(json.dumps({"t0": time.time()}))
    tmp.replace(run_dir / "start.json")


def _ready(run_dir: Path) -> int:
    n = 0
    for path in (run_dir / "events").glob("*.jsonl"):
        n += any('"event": "ready"' in line for line in path.read_text().splitlines())
    return n


def quantities(run_dir: Path, mode: str) -> dict[str, Optional[float]]:
    """What the validation compares, from a run directory (real or simulated alike)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    comm = sorted(_pull_waits(run_dir))
    q = {"updates_per_s": summary["updates_per_s"], "wall_time_s": summary["wall_time_s"],
         "time_to_target_s": summary["time_to_target_s"],
         "pull_wait_p50_s": comm[len(comm) // 2] if comm else None}
    # BSP applies every push fresh (staleness 0 by construction): nothing to predict there.
    if not mode.startswith("bsp"):
        hist = Histogram.of(summary["staleness_hist"])
        q.update(staleness_p50=hist.quantile(0.5), staleness_p99=hist.quantile(0.99),
                 staleness_max=float(hist.max) if hist.counts else None)
    return q


def diagnostics(run_dir: Path) -> dict[str, float]:
    """What a real run spent that the stated physics leaves out, to explain misses:
    the median of each step's compute beyond its drawn device time (a sleep that
    woke late, or real compute above the device time) and of the time between
    one step's end and the next one's start (batch loading, the step's event)."""
    from psgd.config import load_config
    from psgd.workers.device_time import DeviceClock
    cfg = load_config(run_dir / "config.yaml")
    steps = [e for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if e.get("event") == "step"]
    clocks = {r: DeviceClock.from_config(cfg, r) for r in {e["rank"] for e in steps}}
    beyond, between, last_end, taken = [], [], {}, {}
    for e in sorted(steps, key=lambda e: e["t"]):  # a rank's k-th step event is its step k (no restarts here)
        k = taken[e["rank"]] = taken.get(e["rank"], -1) + 1
        beyond.append(e["compute_s"] - clocks[e["rank"]].step_s(k))
        if e["rank"] in last_end:
            between.append(e["t"] - e["step_s"] - last_end[e["rank"]])
        last_end[e["rank"]] = e["t"]
    return {"device_overshoot_p50": statistics.median(beyond),
            "between_steps_p50": statistics.median(between) if between else 0.0}


def _pull_waits(run_dir: Path) -> list[float]:
    """Each pushing step's wait from its push to the parameters it then trains on
    (`comm_s`); a local update's inner steps push nothing and are left out."""
    steps = [e for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if e.get("event") == "step"]
    waits, last_clock = [], {}
    for e in sorted(steps, key=lambda e: e["t"]):
        if e["clock"] > last_clock.get(e["rank"], 0):
            waits.append(e["comm_s"])
        last_clock[e["rank"]] = e["clock"]
    return waits


