"""Runs the simulated scale study (run_study.sh calls it; report.py reads what it writes).

For each W in WORKERS, on the virtual cluster (`psgd bench convergence --on sim`):

1. rates: case none, each family of modes (one bench a family) over a 3-point
   grid (x3 apart) around its scaling rule's rate, 2 seeds a point, with a pilot
   cap; a mode whose best rate sits at an end of its grid gets one more point
   beyond that end (2 seeds) and keeps whichever is better (lower median held
   time to target);
2. the cap: 3x the slowest mode's median time at its chosen rate (the pilot);
3. cases none and straggler (the last rank 4x slower): every mode at its rate
   (one bench a case), SEEDS seeds, that cap, evaluations every cap/100.

The worker counts run in increasing order (the cheapest first). After W =
SWEEP_W, the one-knob sensitivity sweep: both cases again with one knob of the
time model changed (SWEEP_SEEDS seeds, the same rates and cap); ORDER says
whether it runs before or after the larger W.

Every bench is a subprocess; JOBS of them run side by side. The study has a
budget (STUDY_BUDGET_S of wall time): a bench not started by then is not
started, one still running then is stopped, and study.log says which; report.md
lists what did not run. What was chosen (grids, rates, edges, caps) is written
to design.json; study.log gets each bench's wall and CPU seconds.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.yaml"
PSGD = os.environ.get("PSGD", "psgd")
RUNS = Path(os.environ.get("STUDY_RUNS", "/tmp/psgd-simstudy"))
WORKERS = [int(w) for w in os.environ.get("WORKERS", "4 16 64 256").split()]
SEEDS = int(os.environ.get("SEEDS", "5"))
GRID_SEEDS = int(os.environ.get("GRID_SEEDS", "2"))
JOBS = int(os.environ.get("JOBS", "2"))
SWEEP_W = int(os.environ.get("SWEEP_W", "64"))   # 0: no sweep
SWEEP_SEEDS = int(os.environ.get("SWEEP_SEEDS", "3"))
CASES = ["none", "straggler"]
SWEEP_CASES = os.environ.get("SWEEP_CASES", "none straggler").split()
BUDGET_S = float(os.environ.get("STUDY_BUDGET_S", "4500"))   # 75 minutes of wall time
# "sweep-first": the sweep right after W = SWEEP_W, before the larger W; "w-first": after every W.
ORDER = os.environ.get("ORDER", "sweep-first")
CAP_FACTOR = 3.0
GRID_STEP = 3.0
# Families and the rate each centres its grid on. Linear scaling, measured to diverge at
# W = 256 on this workload (the pilot, one seed, 1.2 s cap), is not the centre:
# - synchronous: an update averages 4W examples; linear scaling (rate x W) is 5.1 at
#   W = 256 where 0.3 held the target in 0.28 s; the grid is centred on square-root
#   scaling, SYNC_BASE_LR x sqrt(W) (0.32 at W = 256, 0.04 at W = 4);
# - asynchronous: an update is one worker's batch, so linear scaling keeps the rate,
#   but its staleness grows with W (asp at W = 256: 0.001 held the target in 0.34 s,
#   0.003 diverged); the grid is centred on ASYNC_BASE_LR x sqrt(4 / W) (0.01 at W = 4,
#   0.00125 at W = 256).
SYNC_BASE_LR = 0.02
ASYNC_BASE_LR = 0.01
FAMILIES = {"sync": ("bsp", "bsp+b1"), "async": ("ssp:2", "ssp:8", "asp")}
MODES = [*FAMILIES["sync"], *FAMILIES["async"]]
# Simulated seconds a grid run may take: generous (the pilot above: bsp held the target
# in 0.28 s and asp in 0.34 s at W = 256).
PILOT_CAP_S = {4: 6.0, 16: 4.0, 64: 2.0, 256: 0.8}
# The one-knob sweep (the stated cluster is workload.yaml's sim section).
SWEEP = {"bandwidth-x0.1": ("sim.bandwidth_gbps", 2.5), "request-x10": ("sim.request_us", 300.0),
         "jitter-0": ("sim.compute_jitter", 0.0), "jitter-0.5": ("sim.compute_jitter", 0.5)}

_slots = threading.Semaphore(JOBS)
_STARTED = time.time()
_log_lock = threading.Lock()


def centre_lr(family: str, w: int) -> float:
    return SYNC_BASE_LR * math.sqrt(w) if family == "sync" else ASYNC_BASE_LR * math.sqrt(4 / w)


def grid(centre: float) -> list[float]:
    return [float(f"{centre * f:.3g}") for f in (1 / GRID_STEP, 1.0, GRID_STEP)]


def log(line: str) -> None:
    with _log_lock, open(HERE / "study.log", "a") as f:
        f.write(line + "\n")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def case_sets(case: str, w: int) -> list[str]:
    return [] if case == "none" else ["--set", f"workers.slowdown={{{w - 1}: 4.0}}"]


class OutOfBudget(Exception):
    """A bench not started, or stopped, because the study's budget was spent."""


def bench(name: str, modes: list[str], args: list[str]) -> Path:
    """One `psgd bench convergence` into RUNS/name; its report, CSVs and plots copied to HERE/name."""
    out = RUNS / name
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [PSGD, "bench", "convergence", str(WORKLOAD), "--on", "sim", "--out", str(out),
           "--modes", ",".join(modes), *args]
    timing = RUNS / f"{name.replace('/', '_')}.time"
    with _slots:
        left = _STARTED + BUDGET_S - time.time()
        if left <= 0:
            log(f"{name}: not started (the study's budget of {BUDGET_S:.0f} s was spent)")
            raise OutOfBudget(name)
        t0 = time.time()
        with open(RUNS / f"{name.replace('/', '_')}.out", "w") as f:
            # /usr/bin/time: this bench's own CPU (os.times would add every bench that ended meanwhile);
            # its own session, so that the budget's end stops the bench and not only the timer
            proc = subprocess.Popen(["/usr/bin/time", "-o", str(timing), "-f", "%U %S", *cmd],
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                log(f"{name}: stopped after {time.time() - t0:.0f} s wall (the study's budget of "
                    f"{BUDGET_S:.0f} s was spent)")
                raise OutOfBudget(name) from None
    try:
        cpu = f"{sum(float(x) for x in timing.read_text().split()[-2:]):.0f}"
    except (OSError, ValueError):
        cpu = "?"
    log(f"{name}: {time.time() - t0:.0f} s wall, {cpu} s CPU, exit {code}; load average: {loadavg()}")
    if code != 0:
        raise RuntimeError(f"{name}: psgd bench convergence exited {code} (see {RUNS}/{name}.out)")
    dest = HERE / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for f in ("report.md", "summary.csv", "seeds.csv", "metric_vs_time.png"):
        if (out / f).is_file():
            shutil.copy(out / f, dest / f)
    return dest


def seed_times(seeds_csv: Path) -> dict[tuple[str, float], list[float]]:
    """(label, lr) -> per-seed held time to target (inf where not reached)."""
    out: dict[tuple[str, float], list[float]] = {}
    for r in csv.DictReader(open(seeds_csv)):
        t = float(r["time_to_target_s"]) if r["time_to_target_s"] else math.inf
        out.setdefault((r["label"], float(r["lr"])), []).append(t)
    return out


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def best_rate(times: dict[tuple[str, float], list[float]], label: str) -> tuple[float, float]:
    """(lr, median time) of the label's best rate: the lowest median, then the lower rate."""
    cands = sorted((median(ts), lr) for (lab, lr), ts in times.items() if lab == label)
    return cands[0][1], cands[0][0]


def common(w: int, cap: float) -> list[str]:
    return ["--set", f"cluster.workers={w}", "--set", f"train.max_time_s={cap:g}",
            "--set", f"eval.every_s={cap / 100:.4g}"]  # the resolution: 1% of the cap


def dir_of(mode: str) -> str:
    return mode.replace(":", "").replace("+", "-")


def choose_rates(w: int) -> dict:
    pilot = PILOT_CAP_S[w]
    family = {m: fam for fam, modes in FAMILIES.items() for m in modes}
    with ThreadPoolExecutor(len(FAMILIES)) as pool:   # one bench a family (its modes share a grid)
        futs = {fam: pool.submit(bench, f"w{w}-grid/{fam}", list(modes),
                                 ["--lr-grid", ",".join(f"{x:g}" for x in grid(centre_lr(fam, w))),
                                  "--seeds", str(GRID_SEEDS),
                                  "--title", f"simulated, {w} workers, the {fam} modes over their rate grid, "
                                             "no straggler", *common(w, pilot)])
                for fam, modes in FAMILIES.items()}
        by_family = {fam: seed_times(f.result() / "seeds.csv") for fam, f in futs.items()}
    times = {m: by_family[family[m]] for m in MODES}
    rates, exts = {}, []
    for m in MODES:
        g = grid(centre_lr(family[m], w))
        lr, t = best_rate(times[m], m)
        edge = "low" if lr == g[0] else "high" if lr == g[-1] else ""
        rates[m] = {"family": family[m], "grid": g, "lr": lr, "median_s": t, "edge": edge if math.isfinite(t) else "",
                    "extended_to": None}
        if edge and math.isfinite(t):
            exts.append((m, float(f"{(lr / GRID_STEP if edge == 'low' else lr * GRID_STEP):.3g}")))
    by_rate: dict[float, list[str]] = {}   # modes extended to one rate share a bench
    for m, x in exts:
        by_rate.setdefault(x, []).append(m)
    with ThreadPoolExecutor(max(1, len(by_rate))) as pool:
        futs = {x: pool.submit(bench, f"w{w}-grid/ext-{x:g}", ms,
                               ["--lr-grid", f"{x:g}", "--seeds", str(GRID_SEEDS),
                                "--title", f"simulated, {w} workers, {', '.join(ms)} one rate beyond the grid's end",
                                *common(w, pilot)])
                for x, ms in by_rate.items()}
        ext_times = {x: seed_times(f.result() / "seeds.csv") for x, f in futs.items()}
    for m, x in exts:
        ts = ext_times[x][(m, x)]
        r = rates[m]
        r["extended_to"] = x
        if median(ts) < r["median_s"]:   # the new end is better: it is still an end
            r["lr"], r["median_s"] = x, median(ts)
        else:
            r["edge"] = ""               # bracketed: the best is inside the widened grid
    finite = [r["median_s"] for r in rates.values() if math.isfinite(r["median_s"])]
    cap = float(f"{CAP_FACTOR * max(finite):.2g}") if finite else pilot
    return {"pilot_cap_s": pilot, "cap_s": cap, "rates": rates}


def lr_csv(w: int, design: dict) -> Path:
    path = RUNS / f"w{w}-lr.csv"
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["label", "lr"])
        for m, r in design["rates"].items():
            wr.writerow([m, r["lr"]])
    return path


def run_cases(w: int, design: dict, prefix: str = "", sets: tuple[str, ...] = (), seeds: int = SEEDS,
              cases: tuple[str, ...] = tuple(CASES)) -> None:
    """Every case as its own bench (all modes at their rates), so that JOBS of them run at once."""
    lrs = lr_csv(w, design)
    title = {"none": "no straggler", "straggler": f"rank {w - 1} slowed 4x"}
    with ThreadPoolExecutor(len(cases)) as pool:
        futs = [pool.submit(bench, f"{prefix}w{w}-{c}", MODES,
                            ["--seeds", str(seeds), "--lr-from", str(lrs), "--title", f"simulated, {w} workers, {title[c]}",
                             *common(w, design["cap_s"]), *case_sets(c, w), *sets])
                for c in cases]
        errors = [f.exception() for f in futs if f.exception() is not None]
    if errors:
        raise errors[0]


def sweep(designs: dict) -> None:
    """The one-knob sweep at SWEEP_W, with that W's rates and cap."""
    design = designs[SWEEP_W]
    jobs = [threading.Thread(target=_guard, args=(f"sweep {knob}", run_cases, w_design_args))
            for knob, w_design_args in ((k, (SWEEP_W, design, f"sensitivity/{k}/", ("--set", f"{key}={value}"),
                                             SWEEP_SEEDS, tuple(SWEEP_CASES))) for k, (key, value) in SWEEP.items())]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()


def study_w(w: int, designs: dict) -> None:
    design = choose_rates(w)
    designs[w] = design
    write_design(designs)
    run_cases(w, design)


def write_design(designs: dict) -> None:
    (HERE / "design.json").write_text(json.dumps({
        "sync_base_lr": SYNC_BASE_LR, "async_base_lr": ASYNC_BASE_LR, "grid_step": GRID_STEP, "cap_factor": CAP_FACTOR, "seeds": SEEDS,
        "grid_seeds": GRID_SEEDS, "sweep_w": SWEEP_W, "sweep_seeds": SWEEP_SEEDS, "sweep_cases": SWEEP_CASES,
        "sweep": {k: {"key": key, "value": v} for k, (key, v) in SWEEP.items()},
        "modes": MODES, "cases": CASES,
        "workers": {str(w): d for w, d in sorted(designs.items())}}, indent=1) + "\n")


def main() -> int:
    RUNS.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    kept = _kept_designs()
    log_mode = "a" if kept else "w"   # W kept from an earlier run: their log lines stay
    with open(HERE / "study.log", log_mode) as f:
        f.write(
        f"study started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} on {os.cpu_count()} cores; "
        f"load average: {loadavg()}; jobs {JOBS}; budget {BUDGET_S:.0f} s; order {ORDER}\n"
        f"commit {commit or 'unknown'}; workers {WORKERS}; seeds {SEEDS}"
        + (f"; kept from the earlier run: W = {', '.join(map(str, sorted(kept)))}" if kept else "") + "\n")
    # A part that runs now leaves nothing of its earlier run; W not run now keep theirs.
    stale = [d for w in WORKERS for d in HERE.glob(f"w{w}-*")]
    if SWEEP_W in WORKERS:
        stale.append(HERE / "sensitivity")
    for d in stale:
        shutil.rmtree(d, ignore_errors=True)
    designs: dict = dict(kept)
    for w in sorted(WORKERS):
        t0 = time.time()
        ok = _guard(f"W={w}", study_w, (w, designs))
        log(f"W = {w}: {'done' if ok else 'not complete'} in {time.time() - t0:.0f} s wall")
        if w == SWEEP_W and ok and ORDER == "sweep-first":
            _timed_sweep(designs)
    if SWEEP_W in WORKERS and SWEEP_W in designs and ORDER != "sweep-first":
        _timed_sweep(designs)
    write_design(designs)
    log(f"study runs finished {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        + (f"; not complete: {', '.join(_failed)}" if _failed else ""))
    return 1 if _failed else 0


_failed: list[str] = []


def _kept_designs() -> dict:
    """design.json's W that this run does not redo (WORKERS narrower than the design): kept as they are."""
    path = HERE / "design.json"
    if not path.is_file():
        return {}
    old = json.loads(path.read_text()).get("workers", {})
    return {int(w): d for w, d in old.items() if int(w) not in WORKERS}


def _timed_sweep(designs: dict) -> None:
    t0 = time.time()
    sweep(designs)
    log(f"sensitivity sweep at W = {SWEEP_W}: {time.time() - t0:.0f} s wall")


def _guard(what: str, fn, args: tuple) -> bool:
    """Runs one part; its failure (or the budget's end) is logged and the study goes on."""
    try:
        fn(*args)
        return True
    except Exception as exc:
        _failed.append(f"{what}: {exc}" if not isinstance(exc, OutOfBudget) else f"{what}: out of budget ({exc})")
        return False


if __name__ == "__main__":
    sys.exit(main())
