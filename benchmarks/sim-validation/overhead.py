"""The simulator's validation on what it predicts: a run's overhead beyond its stated device time, and its pull wait.

    .venv/bin/psgd sim profile --out /tmp/host.json                       # first, apart from the matrix
    .venv/bin/python benchmarks/sim-validation/overhead.py --profile /tmp/host.json --fresh [--quick] [--seeds 5] [--cells A,B]
    .venv/bin/python benchmarks/sim-validation/overhead.py --profile /tmp/host.json --report-only
    .venv/bin/python benchmarks/sim-validation/overhead.py --profile /tmp/host.json --sim-only

Every cell runs overhead.yaml (a 2.6 MB MLP, 5 ms of stated device time a step) for real on this
machine and on the simulator, which is told this file, one host of 2 cores with every role on it
(`sim.hosts: {box: {cores: 2}}`) and the host profile (`sim.host_profile`): nothing is fitted on
the matrix's runs. Per cell and seed, from each run directory:
- overhead = wall time − the stated device time: the largest sum over ranks of the device times
  drawn for their steps (psgd.core.step_time, the same draws on both sides);
- pull wait = the median pushing step's wait from its push to its parameters (testbed_runs).
Headline cells are those whose real overhead is >= 30% of the real wall time; the quantities are
scored there: overhead within ±20%, pull wait within ±25% (medians over the seeds). Verdicts ("which
mode ends sooner", bsp against asp in each group) are decisive when every seed agrees on the sign and
the medians differ by more than 5%, tied within 5%, inconclusive otherwise; decisive ones are
counted apart. Quantities true by construction (ASP staleness p50 = W−1 with equal workers) are
listed as sanity checks, not counted. Beside them, each role's CPU per worker step and per shard
request, real (the processes' own, summary role_cpu_s) against what the simulation charged: CPU time
barely depends on the machine's load, so that table says which side of the model is short even
where the wall times cannot be trusted (`--cells` runs a few cells for it). Writes
DIR/overhead-results.jsonl (appended, resumable) and DIR/overhead-report.md. Real runs need a quiet
machine; `--sim-only` keeps the store's real rows and simulates their cells and seeds again with
--profile (simulated figures do not depend on the machine's load).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import testbed_runs as bed  # noqa: E402

CONFIG = HERE / "overhead.yaml"
HOST = "sim.hosts={box: {cores: 2}}"
HEADLINE_SHARE = 0.30
OVERHEAD_WITHIN, PULL_WITHIN, TIE = 0.20, 0.25, 0.05


@dataclass(frozen=True)
class Cell:
    workers: int
    shards: int
    mode: str   # bsp or asp
    case: str   # none, straggler, delay (testbed_runs.case_overrides)

    @property
    def name(self) -> str:
        return f"w{self.workers}-s{self.shards}-{self.mode}-{self.case}"

    def sets(self, seed: int) -> list[str]:
        return [f"cluster.workers={self.workers}", f"cluster.servers={self.shards}", f"consistency.mode={self.mode}",
                f"run.seed={seed}", *bed.case_overrides(self.case, self.workers)]


# Sized for about 12 minutes on a quiet 2-core machine (a real run: 3-10 s, most of it its processes'
# start; a simulated one about a second): 12 cells x 5 seeds.
FULL = [Cell(w, 1, m, "none") for w in (2, 4, 8, 16) for m in ("bsp", "asp")] + \
       [Cell(8, 4, m, "none") for m in ("bsp", "asp")] + [Cell(8, 1, m, "straggler") for m in ("bsp", "asp")]
QUICK = [Cell(2, 1, "bsp", "none"), Cell(2, 1, "asp", "none")]


def stated_device_s(run_dir: Path) -> float:
    """The largest sum over ranks of the device times drawn for the steps each took."""
    from psgd.config import load_config
    from psgd.workers.device_time import DeviceClock
    cfg = load_config(run_dir / "config.yaml")
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps: dict[int, int] = {}
    for e in events:
        if e.get("event") == "step":
            steps[e["rank"]] = steps.get(e["rank"], 0) + 1
    return max(sum(DeviceClock.from_config(cfg, r).step_s(k) for k in range(n)) for r, n in steps.items())


def measure(run_dir: Path, workers: int) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    waits = sorted(bed._pull_waits(run_dir))
    wall = summary["wall_time_s"]
    out = {"wall_s": wall, "device_s": stated_device_s(run_dir), "pull_wait_s": waits[len(waits) // 2] if waits
           else None}
    out["overhead_s"] = wall - out["device_s"]
    # CPU per worker step and per shard request (user + system, every thread; sim: what it charged)
    cpu, system = summary.get("role_cpu_s") or {}, summary.get("role_sys_s") or {}
    steps, requests = summary["worker_steps"], summary["worker_steps"] * summary["servers"]
    for role, per in (("worker", steps), ("server", requests)):
        if role in cpu and per:
            out[f"{role}_cpu_ms"] = 1e3 * cpu[role] / per
        if role in system and per:
            out[f"{role}_sys_ms"] = 1e3 * system[role] / per
    if summary.get("staleness_hist"):
        from psgd.core.histogram import Histogram
        out["staleness_p50"] = Histogram.of(summary["staleness_hist"]).quantile(0.5)
    return out


def run(side: str, cell: Cell, seed: int, profile: Path, runs: Path, sim_sets: tuple[str, ...] = ()) -> dict:
    out = runs / side / f"{cell.name}-s{seed}"
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    sets = cell.sets(seed)
    t0 = time.monotonic()
    if side == "real":
        bed._launch([*bed.PSGD, "launch", str(CONFIG), "--out", str(out), "--quiet", *bed._sets(sets)], out)
    else:
        from psgd.cli import main
        argv = ["launch", str(CONFIG), "--on", "sim", "--out", str(out), "--quiet",
                *bed._sets(sets + [HOST, f"sim.host_profile={profile}", *sim_sets])]
        if main(argv) != 0:
            raise RuntimeError(f"psgd {' '.join(argv)} failed")
    return {"side": side, "cell": cell.name, "seed": seed, "run_s": round(time.monotonic() - t0, 1),
            "load_avg": os.getloadavg()[0], **measure(out, cell.workers)}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _within(real, sim, tol) -> bool:
    return real is not None and sim is not None and real > 0 and abs(sim / real - 1) <= tol


def verdict(bsp: list[float], asp: list[float]) -> str:
    """bsp / asp / tie / inconclusive: which mode ends sooner over the seeds (paired by seed)."""
    mb, ma = statistics.median(bsp), statistics.median(asp)
    if abs(mb - ma) <= TIE * max(mb, ma):
        return "tie"
    signs = {b < a for b, a in zip(bsp, asp)}
    return ("bsp" if mb < ma else "asp") if len(signs) == 1 else "inconclusive"


def report(records: list[dict], cells: list[Cell], profile: dict, sim_sets: tuple[str, ...] = ()) -> str:
    by = {(r["side"], r["cell"], r["seed"]): r for r in records}
    rows, headline = [], []
    for cell in cells:
        seeds = sorted(s for (side, name, s) in by if side == "real" and name == cell.name
                       and ("sim", name, s) in by)
        if not seeds:
            continue
        real = [by["real", cell.name, s] for s in seeds]
        sim = [by["sim", cell.name, s] for s in seeds]
        row = {"cell": cell.name, "seeds": len(seeds)}
        for key in ("wall_s", "overhead_s", "pull_wait_s", "staleness_p50", "worker_cpu_ms", "server_cpu_ms",
                    "worker_sys_ms", "server_sys_ms"):
            row[key] = (_median(r.get(key) for r in real), _median(r.get(key) for r in sim))
        row["share"] = row["overhead_s"][0] / row["wall_s"][0]
        row["headline"] = row["share"] >= HEADLINE_SHARE
        row["overhead_ok"] = _within(*row["overhead_s"], OVERHEAD_WITHIN)
        row["pull_ok"] = _within(*row["pull_wait_s"], PULL_WITHIN)
        rows.append(row)
        if row["headline"]:
            headline.append(row)
    lines = ["# The simulator against real runs: overhead and pull wait", "",
             f"Host profile (the only measured input, taken apart from the matrix): {profile['measured_on']}.",
             "Stated: overhead.yaml, `sim.hosts: {box: {cores: 2}}` (every role on it)"
             + "".join(f", `{s}`" for s in sim_sets) + ". Fitted on the matrix: nothing.",
             "Simulated figures are labelled sim; real ones real; medians over the seeds.", "",
             "| cell | seeds | overhead share of wall (real) | overhead real / sim (s) | error | pull wait real / sim (ms) "
             "| error | headline |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        (ro, so), (rp, sp) = r["overhead_s"], r["pull_wait_s"]
        err = lambda a, b: f"{(b / a - 1) * 100:+.0f}%" if a and b is not None else "n/a"  # noqa: E731
        lines.append(f"| {r['cell']} | {r['seeds']} | {r['share'] * 100:.0f}% | {ro:.3f} / {so:.3f} | {err(ro, so)} | "
                     f"{(rp or 0) * 1e3:.2f} / {(sp or 0) * 1e3:.2f} | {err(rp, sp)} | {'yes' if r['headline'] else 'no'} |")
    n = len(headline)
    o_hits, p_hits = sum(r["overhead_ok"] for r in headline), sum(r["pull_ok"] for r in headline)
    lines += ["", f"Headline cells (real overhead >= {HEADLINE_SHARE * 100:.0f}% of wall): {n}. "
              f"Overhead within ±{OVERHEAD_WITHIN * 100:.0f}%: {o_hits} of {n}; pull wait within "
              f"±{PULL_WITHIN * 100:.0f}%: {p_hits} of {n}."]
    misses = [r["cell"] for r in headline if not (r["overhead_ok"] and r["pull_ok"])]
    lines += ["", "Misses: " + (", ".join(misses) if misses else "none") + "."]
    lines += ["", "## Verdicts: which mode ends sooner (wall time), bsp against asp", "",
              "| group | real | sim | agree |", "|---|---|---|---|"]
    counts = {"decisive": [0, 0], "tie/inconclusive": [0, 0]}
    for w, s, case in dict.fromkeys((c.workers, c.shards, c.case) for c in cells):
        names = {m: Cell(w, s, m, case).name for m in ("bsp", "asp")}
        seeds = sorted(set.intersection(*[{k[2] for k in by if k[1] == names[m] and k[0] == side}
                                          for m in names for side in ("real", "sim")])) if by else []
        if not seeds:
            continue
        got = {side: verdict([by[side, names["bsp"], x]["wall_s"] for x in seeds],
                             [by[side, names["asp"], x]["wall_s"] for x in seeds]) for side in ("real", "sim")}
        kind = "decisive" if got["real"] in ("bsp", "asp") else "tie/inconclusive"
        counts[kind][0] += 1
        counts[kind][1] += got["real"] == got["sim"]
        lines.append(f"| w{w}-s{s}-{case} | {got['real']} | {got['sim']} | {'yes' if got['real'] == got['sim'] else 'no'} |")
    lines += ["", f"Decisive real verdicts: {counts['decisive'][0]}, the simulator agrees on {counts['decisive'][1]}; "
              f"ties and inconclusive: {counts['tie/inconclusive'][0]}, agreeing on {counts['tie/inconclusive'][1]}.",
              "", "## Sanity checks (true by construction, not counted)", "",
              "| cell | ASP staleness p50 real / sim (W−1 with equal workers) |", "|---|---|"]
    for r in rows:
        if "-asp-none" in r["cell"] and r["staleness_p50"][0] is not None:
            lines.append(f"| {r['cell']} | {r['staleness_p50'][0]:g} / {r['staleness_p50'][1]:g} |")
    lines += cpu_table(rows)
    return "\n".join(lines) + "\n"


def cpu_table(rows: list[dict]) -> list[str]:
    """Each role's CPU per worker step and per shard request, real against charged: CPU time does not
    depend on the machine's load the way wall time does, so it says which side of the model is short."""
    rows = [r for r in rows if r["worker_cpu_ms"][0] is not None and r["worker_cpu_ms"][1] is not None]
    if not rows:
        return []
    ms = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    err = lambda a, b: f"{(b / a - 1) * 100:+.0f}%" if a and b is not None else "n/a"  # noqa: E731
    lines = ["", "## CPU per worker step and per shard request (user + system, every thread)", "",
             "Real: the processes' own CPU while they trained (summary role_cpu_s); sim: what the time model "
             "charged each role's cores. Medians over the seeds.", "",
             "| cell | worker ms/step real / sim | error | of it system (real) | shard ms/request real / sim | error "
             "| of it system (real) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        (rw, sw), (rs, ss) = r["worker_cpu_ms"], r["server_cpu_ms"]
        lines.append(f"| {r['cell']} | {ms(rw)} / {ms(sw)} | {err(rw, sw)} | {ms(r['worker_sys_ms'][0])} | "
                     f"{ms(rs)} / {ms(ss)} | {err(rs, ss)} | {ms(r['server_sys_ms'][0])} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, required=True, help="psgd sim profile --out FILE, run before and apart")
    ap.add_argument("--quick", action="store_true", help="2 cells (W=2, bsp and asp): a smoke test")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--cells", default="", help="only these cells, by name (comma-separated), e.g. w2-s1-bsp-none")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--runs", type=Path, default=Path("/tmp/psgd-overhead"))
    ap.add_argument("--report-only", action="store_true", help="the report from --out's overhead-results.jsonl")
    ap.add_argument("--fresh", action="store_true", help="start --out's overhead-results.jsonl again (else a rerun "
                    "resumes it, keeping every cell and seed it holds, whatever profile its sim runs used)")
    ap.add_argument("--sim-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config key for the simulated side only (repeatable), e.g. sim.sharing=ps")
    ap.add_argument("--sim-only", action="store_true", help="keep --out's real rows and simulate their cells and "
                    "seeds again with --profile (the real side is not run)")
    args = ap.parse_args(argv)
    if args.sim_only and (args.fresh or args.report_only):
        ap.error("--sim-only keeps the store's real rows: not with --fresh or --report-only")
    from psgd.sim.host_profile import load_host_profile
    profile = load_host_profile(str(args.profile.resolve()))
    cells = QUICK if args.quick else FULL
    if args.cells:
        names = args.cells.split(",")
        cells = [c for c in FULL if c.name in names]
        if len(cells) != len(names):
            ap.error(f"--cells: unknown cell in {args.cells!r} (cells: {', '.join(c.name for c in FULL)})")
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "overhead-results.jsonl"
    if args.fresh and store.exists():
        store.unlink()
    records = [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []
    if args.sim_only:
        records = [r for r in records if r["side"] == "real"]
        store.write_text("".join(json.dumps(r) + "\n" for r in records))
        real = {(r["cell"], r["seed"]) for r in records}
        cells = [c for c in cells if any(name == c.name for name, _ in real)]
    if not args.report_only:
        done = {(r["side"], r["cell"], r["seed"]) for r in records}
        for side, cell, seed in itertools.product(("real", "sim"), cells, range(args.seeds)):
            if (side, cell.name, seed) in done or (args.sim_only and (cell.name, seed) not in real):
                continue
            record = run(side, cell, seed, args.profile.resolve(), args.runs, tuple(args.sim_set))
            records.append(record)
            with open(store, "a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{side} {cell.name} seed {seed}: wall {record['wall_s']:.3f} s, overhead {record['overhead_s']:.3f} s, "
                  f"run {record['run_s']} s, load {record['load_avg']:.1f}", flush=True)
    text = report(records, cells, {"measured_on": profile.measured_on}, tuple(args.sim_set))
    (args.out / "overhead-report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
