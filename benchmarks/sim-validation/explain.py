"""The measurements behind each miss: what the real runs spent that the simulated ones did not.

    .venv/bin/python benchmarks/sim-validation/explain.py --out DIR --runs RUNS

For every cell with a quantity outside ±15% (results.csv in --out), from the
run directories (--runs, as validate.py wrote them), medians over the seeds:
- release spread: per clock, the time from the first worker's step end to the
  last one's (every worker's parameters of that clock arrived), median over
  clocks. Under BSP a clock's replies leave the shard together: a wide real
  spread with a narrow simulated one is the workers taking turns on the cores
  (or the shard sending one reply after another), not the network.
- round trip: the median pushing step's `comm_s` (push to parameters in hand: the
  pull wait compared, which under BSP also holds the barrier).
- overshoot: the median real step's compute beyond its drawn device time (a
  sleep that woke late: the machine's load).
- cpu per clock: the real run's shard service (busy_s) per clock, and the
  workers' real compute it cannot see, as a share of the device time.
Writes misses.md and prints it. The per-run figures are psgd.bench.explain's (as
`psgd explain` reads a run).
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from psgd.bench.explain import release_spreads_s, shard_busy_per_clock_s, worker_steps  # noqa: E402
from psgd.runtime.events import read_events  # noqa: E402

__all__ = ["main"]


def _events(run: Path) -> list[dict]:
    return read_events(run / "metrics.jsonl")


def release_spread_ms(run: Path, workers: int) -> float:
    spreads = release_spreads_s(worker_steps(_events(run)), workers)
    return statistics.median(spreads) * 1e3 if spreads else float("nan")


def round_trip_ms(run: Path) -> float:
    """The pull wait validate.py compares (pushing steps only), in ms."""
    from testbed_runs import _pull_waits
    comm = _pull_waits(run)
    return statistics.median(comm) * 1e3 if comm else float("nan")


def shard_busy_ms_per_clock(run: Path) -> float:
    busy = shard_busy_per_clock_s(_events(run))
    return busy * 1e3 if busy is not None else float("nan")


def _median_over(runs: list[Path], f) -> float:
    values = [f(r) for r in runs]
    return statistics.median(values) if values else float("nan")


def _runs(root: Path, side: str, cell: str) -> list[Path]:
    # validate.py keeps each try; the measurement it kept is the one in measurements.jsonl (try0 unless rerun)
    return sorted(p for p in (root / side).glob(f"{cell}-s*/try*") if (p / "metrics.jsonl").exists())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.out / "results.csv")))
    kept = {(m["cell"], m["seed"]): m.get("attempt", 0) for m in map(json.loads, (args.out / "measurements.jsonl")
                                                                       .read_text().splitlines())
            if m["side"] == "real"}
    missed = defaultdict(list)
    for r in rows:
        if r["within"] == "no":
            missed[(r["cell"], int(r["workers"]))].append(f"{r['quantity']} {r['error'] or 'one side'}")
    lines = ["| cell | misses | release spread real / simulated (ms) | round trip real / simulated (ms) "
             "| overshoot real (ms) | shard busy per clock real (ms) |", "|---|---|---|---|---|---|"]
    for (cell, workers), what in missed.items():
        real = [p for p in _runs(args.runs, "real", cell)
                if kept.get((cell, int(p.parent.name.rsplit("-s", 1)[1]))) == int(p.name[3:])]
        sim = _runs(args.runs, "sim", cell)
        spread = [_median_over(real, lambda r, w=workers: release_spread_ms(r, w)),
                  _median_over(sim, lambda r, w=workers: release_spread_ms(r, w))]
        trip = [_median_over(real, round_trip_ms), _median_over(sim, round_trip_ms)]
        over = [m.get("device_overshoot_p50", float("nan")) * 1e3 for m in map(
            json.loads, (args.out / "measurements.jsonl").read_text().splitlines())
            if m["side"] == "real" and m["cell"] == cell]
        lines.append(f"| {cell} | {'; '.join(what)} | {spread[0]:.1f} / {spread[1]:.1f} | {trip[0]:.2f} / {trip[1]:.2f} "
                     f"| {statistics.median(over) if over else float('nan'):.2f} "
                     f"| {_median_over(real, shard_busy_ms_per_clock):.1f} |")
    text = "\n".join(lines) + "\n"
    (args.out / "misses.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
