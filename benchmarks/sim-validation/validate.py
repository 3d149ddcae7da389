"""Does the virtual cluster predict real runs it never saw? Regenerates this directory:

    .venv/bin/python benchmarks/sim-validation/validate.py            # the full matrix
    .venv/bin/python benchmarks/sim-validation/validate.py --quick    # W=4, bsp and asp, loopback, no straggler

Real runs on the testbed (testbed.yaml: every worker step lasts its stated device
time, workers.device_ms; links loopback, or shaped by tbf between namespaces),
then the same cells on the simulator given that file and the stated links, no
calibration. Each quantity's simulated median over the seeds against the real
one (within ±15%?), and every pairwise "which mode is faster" verdict of
psgd.bench.stats on both sides. Writes results.csv, verdicts.csv, report.md and
run.log here (or --out); run directories go to --runs.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from testbed_runs import CASES_ALL, MODES, Cell, diagnostics, quantities, run_real, run_sim  # noqa: E402

from psgd.bench.shaped_net import LinkShape  # noqa: E402
from psgd.bench.verdict import Sample, judge  # noqa: E402

TOLERANCE = 0.15
FULL = dict(workers=[4, 8, 16], modes=list(MODES), cases=list(CASES_ALL), nets=["loopback", "shaped"], seeds=2)
QUICK = dict(workers=[4], modes=["bsp", "asp"], cases=["none"], nets=["loopback"], seeds=2)
VERDICT_QUANTITIES = ("wall_time_s", "time_to_target_s")  # lower is faster


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small subset: W=4, bsp and asp, loopback, one case")
    ap.add_argument("--seeds", type=int, help="seeds per cell (full: 2, quick: 2)")
    for key in ("workers", "modes", "cases", "nets"):
        ap.add_argument(f"--{key}", help=f"comma-separated, instead of the plan's {key}")
    ap.add_argument("--rate-mbit", type=float, default=100.0, help="each shaped link's rate (default 100)")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="each shaped link's delay (needs netem)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--runs", type=Path, default=Path("/tmp/psgd-sim-validation"))
    args = ap.parse_args(argv)
    plan = dict(QUICK if args.quick else FULL)
    for key in ("workers", "modes", "cases", "nets"):
        given = getattr(args, key)
        if given:
            plan[key] = [int(v) if key == "workers" else v for v in given.split(",")]
    seeds = list(range(args.seeds or plan["seeds"]))
    shape = LinkShape(args.rate_mbit, args.latency_ms)
    cells = [Cell(w, m, c, n) for n in plan["nets"] for c in plan["cases"] for w in plan["workers"]
             for m in plan["modes"]]
    config = HERE / "testbed.yaml"
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / "run.log", "w")

    def say(line: str) -> None:
        log.write(line + "\n")
        log.flush()
        print(line, flush=True)

    say(f"started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} on {os.cpu_count()} cores, load {_load()}; "
        f"commit {_commit()}; {'--quick' if args.quick else 'full'}: {len(cells)} cells x {len(seeds)} seeds; "
        f"shaped links {shape.rate_mbit:g} Mb/s, {shape.latency_ms:g} ms")
    measured: dict[tuple, dict[str, list]] = {}
    for side, runner in (("real", run_real), ("sim", run_sim)):
        for cell, seed in itertools.product(cells, seeds):
            out = args.runs / side / f"{cell.name}-s{seed}"
            if out.exists():
                subprocess.run(["rm", "-rf", str(out)], check=True)
            t0 = time.monotonic()
            runner(config, cell, seed, shape, out)
            q = quantities(out, cell.mode)
            for k, v in q.items():
                measured.setdefault((side, cell), {}).setdefault(k, []).append(v)
            why = f"; not predicted: {_fmt_diag(diagnostics(out))}" if side == "real" else ""
            say(f"{side} {cell.name} seed {seed}: {time.monotonic() - t0:.1f} s, load {_load()}; "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in q.items()) + why)
    rows = _compare(cells, measured)
    verdicts = _verdicts(cells, measured)
    _write(args.out, rows, verdicts, plan, seeds, shape, args.quick)
    hits = sum(r["within"] == "yes" for r in rows)
    counted = sum(r["within"] in ("yes", "no") for r in rows)
    agree = sum(v["agree"] == "yes" for v in verdicts)
    say(f"finished {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {hits} of {counted} quantities within "
        f"±{TOLERANCE:.0%}; {agree} of {len(verdicts)} verdicts agree")
    return 0


def _compare(cells, measured) -> list[dict]:
    rows = []
    for cell in cells:
        real, sim = measured[("real", cell)], measured[("sim", cell)]
        for k in real:
            r, s = _median(real[k]), _median(sim[k])
            rows.append({"cell": cell.name, "workers": cell.workers, "mode": cell.mode, "case": cell.case,
                         "net": cell.net, "quantity": k, "real": _fmt(r), "simulated": _fmt(s),
                         "error": _error(r, s), "within": _within(r, s)})
    return rows


def _verdicts(cells, measured) -> list[dict]:
    out = []
    groups = sorted({c.group for c in cells})
    for group in groups:
        members = [c for c in cells if c.group == group]
        for a, b in itertools.combinations(members, 2):
            for k in VERDICT_QUANTITIES:
                kinds = {}
                for side in ("real", "sim"):
                    # A seed that never reached the target is censored at how long it ran.
                    va, vb = (Sample.of([math.inf if v is None else v for v in measured[(side, c)][k]],
                                        caps=measured[(side, c)].get("wall_time_s")) for c in (a, b))
                    kinds[side] = judge(va, vb).outcome.value
                out.append({"workers": a.workers, "case": a.case, "net": a.net, "quantity": k,
                            "a": a.mode, "b": b.mode, "real": kinds["real"], "simulated": kinds["sim"],
                            "agree": "yes" if kinds["real"] == kinds["sim"] else "no"})
    return out


def _median(values):
    if any(v is None for v in values):  # a seed that never reached the target: the median may be inf
        values = [math.inf if v is None else v for v in values]
    return statistics.median(values)


def _error(real, sim) -> str:
    if math.isinf(real) or math.isinf(sim) or real == 0:
        return ""
    return f"{sim / real - 1:+.1%}"


def _within(real, sim) -> str:
    """yes / no; 'not counted' where neither side reached the target (that cannot fail)."""
    if math.isinf(real) and math.isinf(sim):
        return "not counted"
    if math.isinf(real) or math.isinf(sim):
        return "no"
    return "yes" if abs(sim - real) <= TOLERANCE * abs(real) else "no"


def _write(out: Path, rows, verdicts, plan, seeds, shape, quick) -> None:
    for name, table in (("results.csv", rows), ("verdicts.csv", verdicts)):
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)
    hits = sum(r["within"] == "yes" for r in rows)
    counted = sum(r["within"] in ("yes", "no") for r in rows)
    agree = sum(v["agree"] == "yes" for v in verdicts)
    lines = [f"# Simulated against real: {'the --quick subset' if quick else 'the full matrix'}", "",
             f"Seeds {seeds}; workers {plan['workers']}; modes {plan['modes']}; cases {plan['cases']}; "
             f"nets {plan['nets']} (shaped: {shape.rate_mbit:g} Mb/s per link, {shape.latency_ms:g} ms). "
             "Medians over the seeds; 'simulated' is the virtual cluster's figure, given testbed.yaml and the "
             "stated links, nothing calibrated.", "",
             f"**{hits} of {counted} quantities within ±{TOLERANCE:.0%}; {agree} of {len(verdicts)} pairwise "
             "verdicts agree.**", "",
             "| cell | quantity | real | simulated | error | within |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['cell']} | {r['quantity']} | {r['real']} | {r['simulated']} | {r['error']} | {r['within']} |"
              for r in rows]
    lines += ["", "| W | case | net | quantity | a vs b | real | simulated | agree |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {v['workers']} | {v['case']} | {v['net']} | {v['quantity']} | {v['a']} vs {v['b']} | {v['real']} "
              f"| {v['simulated']} | {v['agree']} |" for v in verdicts]
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return "not reached"
    return f"{v:.4g}"


def _fmt_diag(d: dict) -> str:
    return ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in d.items())


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _commit() -> str:
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return res.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
