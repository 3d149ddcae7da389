"""Does the virtual cluster predict real runs it never saw? Regenerates this directory:

    .venv/bin/python benchmarks/sim-validation/validate.py            # the full matrix
    .venv/bin/python benchmarks/sim-validation/validate.py --quick    # W=4, bsp and asp, loopback, no straggler

Real runs on the testbed (testbed.yaml: every worker step lasts its stated device
time, workers.device_ms; links loopback, or shaped by tbf between namespaces),
then the same cells on the simulator given that file and the stated links. One
thing is calibrated, per net, on runs outside the matrix (one ASP worker, seeds
100 and up, refitted every 8 real runs, the median of the fits given): this
host's software cost per message (`psgd sim calibrate`'s request_us and
latency_us); every cell is also simulated without it ("stated only"). Each
quantity's simulated median over the seeds against the real one (within ±15%?),
and every pairwise "which mode is faster" verdict of psgd.bench.verdict on both
sides. Every run's figures go to measurements.jsonl as it ends (a rerun with the
same --out skips what is there; --report-only rebuilds the tables from it);
writes results.csv, verdicts.csv, report.md and run.log here (or --out); run
directories go to --runs.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import testbed_runs as bed  # noqa: E402
from load_watch import LoadWatch, load_avg, runnable_now  # noqa: E402
from tables import write_tables  # noqa: E402

from psgd.bench.shaped_net import LinkShape  # noqa: E402

FULL = dict(workers=[4, 8, 16], modes=list(bed.MODES), cases=list(bed.CASES_ALL), nets=["loopback", "shaped"],
            seeds=2)
QUICK = dict(workers=[4], modes=["bsp", "asp"], cases=["none"], nets=["loopback"], seeds=2)
EXTREME_RUNNABLE = 5 * (os.cpu_count() or 1)  # runnable threads (median while training) that call for a rerun
HOST_COST_EVERY = 8  # real runs between two fits of the host's per-message cost


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small subset: W=4, bsp and asp, loopback, one case")
    ap.add_argument("--seeds", type=int, help="seeds per cell (full: 2, quick: 2)")
    for key in ("workers", "modes", "cases", "nets"):
        ap.add_argument(f"--{key}", help=f"comma-separated, instead of the plan's {key}")
    ap.add_argument("--cells", help="explicit cells W/mode/case/net separated by commas (instead of the product)")
    ap.add_argument("--rate-mbit", type=float, default=100.0, help="each shaped link's rate (default 100)")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="each shaped link's delay (needs netem)")
    ap.add_argument("--nice", type=int, default=bed.NICE, help=f"the real runs' sessions' niceness once they train (default {bed.NICE})")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--runs", type=Path, default=Path("/tmp/psgd-sim-validation"))
    ap.add_argument("--report-only", action="store_true", help="rebuild the tables from --out's measurements.jsonl")
    ap.add_argument("--resimulate", action="store_true",
                    help="simulate every cell in --out's measurements.jsonl again, given the median of all its host fits")
    args = ap.parse_args(argv)
    bed.NICE = args.nice
    plan = dict(QUICK if args.quick else FULL)
    for key in ("workers", "modes", "cases", "nets"):
        given = getattr(args, key)
        if given:
            plan[key] = [int(v) if key == "workers" else v for v in given.split(",")]
    seeds = list(range(args.seeds or plan["seeds"]))
    shape = LinkShape(args.rate_mbit, args.latency_ms)
    if args.cells:
        cells = [_cell(text) for text in args.cells.split(",")]
    else:
        cells = [bed.Cell(w, m, c, n) for n in plan["nets"] for c in plan["cases"] for w in plan["workers"]
                 for m in plan["modes"]]
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "measurements.jsonl"
    if args.resimulate:
        kept = [m for m in _read(store) if m["side"] not in ("sim", "stated")]
        store.write_text("".join(json.dumps(m) + "\n" for m in kept))
        cells = list({m["cell"]: bed.Cell(m["workers"], m["mode"], m["case"], m["net"]) for m in kept
                      if m["side"] == "real"}.values())
        seeds = sorted({m["seed"] for m in kept if m["side"] == "real"})
    if args.report_only:
        return _report(args.out, store, shape, args.quick)
    log = open(args.out / "run.log", "a")

    def say(line: str) -> None:
        log.write(line + "\n")
        log.flush()
        print(line, flush=True)

    say(f"started {_now()} on {os.cpu_count()} cores, load {load_avg()}; commit {_commit()}; "
        f"{len(cells)} cells x {len(seeds)} seeds: {', '.join(c.name for c in cells)}; "
        f"shaped links {shape.rate_mbit:g} Mb/s, {shape.latency_ms:g} ms; real runs' sessions at nice {bed.NICE} while they train")
    done = {(m["side"], m.get("cell"), m.get("seed")) for m in _read(store)}
    real = [(cell, seed) for cell, seed in itertools.product(cells, seeds) if ("real", cell.name, seed) not in done]
    if any(cell.net == "shaped" for cell, _ in real) and not any(m["side"] == "link_probe" for m in _read(store)):
        _probe(store, shape, say)
    for net in dict.fromkeys(cell.net for cell, _ in real):
        on_net = [(cell, seed) for cell, seed in real if cell.net == net]
        for i, (cell, seed) in enumerate(on_net):
            if i % HOST_COST_EVERY == 0:  # the host's cost drifts with the other jobs: fitted again and again
                _calibrate_host(args, store, net, shape, say)
            _store(store, _measure("real", cell, seed, shape, None, args.runs, HERE / "testbed.yaml", say))
    hosts = {net: _host_cost(store, net, args, shape, say) for net in dict.fromkeys(c.net for c in cells)}
    for side in ("sim", "stated"):
        for cell, seed in itertools.product(cells, seeds):
            if (side, cell.name, seed) not in done:
                _store(store, _measure(side, cell, seed, shape, hosts[cell.net], args.runs, HERE / "testbed.yaml",
                                       say))
    return _report(args.out, store, shape, args.quick, say)


def _probe(store: Path, shape, say) -> None:
    """The shaped link as a push-sized message meets it (link_probe.py), before the shaped runs."""
    from link_probe import probe_link

    from psgd.config import load_config
    from psgd.tasks import build_model, task_shape
    cfg = load_config(HERE / "testbed.yaml")
    nbytes = 4 * sum(p.numel() for p in build_model(cfg, task_shape(cfg)).parameters())
    found = probe_link(shape, nbytes)
    _store(store, {"side": "link_probe", "nbytes": nbytes, "message_s_p50": found.message_s_p50,
                   "ping_s_p50": found.ping_s_p50, "mbit_per_s": found.mbit_per_s, "load_avg": load_avg()})
    say(f"link probe: a {nbytes} B message over the shaped link: {found.message_s_p50 * 1e3:.2f} ms median, "
        f"one byte {found.ping_s_p50 * 1e3:.2f} ms: {found.mbit_per_s:.1f} Mb/s delivered "
        f"(stated {shape.rate_mbit:g}), load {load_avg()}")


def _store(store: Path, record: dict) -> None:
    with open(store, "a") as f:
        f.write(json.dumps(record) + "\n")


def _measure(side, cell, seed, shape, host, runs: Path, config: Path, say) -> dict:
    """One run (a real one again, once, where the machine was extremely busy while it trained)."""
    record = {"side": side, "cell": cell.name, "workers": cell.workers, "mode": cell.mode, "case": cell.case,
              "net": cell.net, "seed": seed}
    attempts = []
    for attempt in range(2 if side == "real" else 1):
        out = runs / side / f"{cell.name}-s{seed}" / f"try{attempt}"
        if out.exists():
            subprocess.run(["rm", "-rf", str(out)], check=True)
        t0 = time.monotonic()
        if side == "real":
            with LoadWatch() as watch:
                bed.run_real(config, cell, seed, shape, out)
            busy = watch.during(out)
            extra = {"runnable_p50": busy.median if busy else None, "runnable_max": busy.max if busy else None,
                     **{k: round(v, 6) for k, v in bed.diagnostics(out).items()}}
        else:
            bed.run_sim(config, cell, seed, shape, out, host if side == "sim" else None)
            extra = {}
        q = bed.quantities(out, cell.mode)
        attempts.append({**record, "quantities": q, "load_avg": load_avg(),
                         "run_s": round(time.monotonic() - t0, 1), "attempt": attempt, **extra})
        say(f"{side} {cell.name} seed {seed} try {attempt}: {attempts[-1]['run_s']} s, load {load_avg()}"
            + (f", while training {busy}" if side == "real" else "") + "; "
            + ", ".join(f"{k} {_fmt(v)}" for k, v in q.items())
            + (f"; not predicted: overshoot {extra['device_overshoot_p50'] * 1e3:.2f} ms, between steps "
               f"{extra['between_steps_p50'] * 1e3:.2f} ms" if side == "real" else ""))
        if side != "real" or busy is None or busy.median <= EXTREME_RUNNABLE:
            break
        now = runnable_now()
        if now > EXTREME_RUNNABLE:  # the machine is as busy as it was: a second run would measure the same
            say(f"  {busy.median:g} runnable threads while it trained (> {EXTREME_RUNNABLE}), {now:g} now: kept")
            break
        say(f"  {busy.median:g} runnable threads while it trained (> {EXTREME_RUNNABLE}), {now:g} now: run again")
    return min(attempts, key=lambda a: a.get("runnable_p50") or 0.0)


def _host_cost(store: Path, net: str, args, shape, say) -> bed.HostCost:
    """The per-message cost the simulator is given on `net`: the median of every fit there."""
    fits = [m["fitted"] for m in _read(store) if m["side"] == "host_cost" and m.get("net", "loopback") == net]
    if not fits:
        _calibrate_host(args, store, net, shape, say)
        fits = [m["fitted"] for m in _read(store) if m["side"] == "host_cost" and m.get("net", "loopback") == net]
    host = bed.HostCost(statistics.median(f["request_us"] for f in fits),
                        statistics.median(f["latency_us"] for f in fits))
    say(f"host cost given to the simulator on {net}: the median of {len(fits)} fits: request_us "
        f"{host.request_us:.1f}, latency_us {host.latency_us:.1f}")
    return host


def _calibrate_host(args, store: Path, net: str, shape, say) -> None:
    """One calibration run (bed.measure_host_cost), stored; its seed counts the ones before it."""
    seed = bed.HOST_COST_SEED + sum(m["side"] == "host_cost" for m in _read(store))
    cell = bed.host_cost_cell(net)
    out = args.runs / "real" / f"{cell.name}-s{seed}"
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    with LoadWatch() as watch:
        host, evidence = bed.measure_host_cost(HERE / "testbed.yaml", out, net, shape, seed)
    busy = watch.during(out)
    _store(store, {"side": "host_cost", "cell": cell.name, "net": net, "seed": seed, "fitted": evidence.pop("fitted"),
                   "evidence": evidence, "load_avg": load_avg(), "runnable_p50": busy.median if busy else None})
    say(f"host cost (calibrated on {cell.name} seed {seed}, load {load_avg()}"
        f"{f', while training {busy}' if busy else ''}): request_us {host.request_us}, latency_us {host.latency_us} "
        f"(shard service {evidence['service_us_per_push']} us per push, unwaited round trip "
        f"{evidence['unwaited_comm_ms_mean']} ms mean, {evidence['unwaited_comm_ms_median']} ms median)")


def _report(out: Path, store: Path, shape: LinkShape, quick: bool, say=print) -> int:
    measured = _read(store)
    summary = write_tables(out, measured, shape, quick)
    say(f"finished {_now()}: {summary}")
    return 0


def _read(store: Path) -> list[dict]:
    if not store.exists():
        return []
    return [json.loads(line) for line in store.read_text().splitlines() if line.strip()]


def _cell(text: str) -> bed.Cell:
    w, mode, case, net = text.split("/")
    if mode not in bed.MODES or case not in bed.CASES_ALL or net not in ("loopback", "shaped"):
        raise SystemExit(f"validate.py: --cells: {text!r} is not W/mode/case/net with a known mode, case and net")
    return bed.Cell(int(w), mode, case, net)


def _fmt(v) -> str:
    return "not reached" if v is None else f"{v:.4g}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _commit() -> str:
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return res.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
