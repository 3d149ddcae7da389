"""The BSP release spread after a barrier, simulated on one stated 2-core host, against the testbed's.

    .venv/bin/python benchmarks/sim-validation/spread.py [--profile cpu-reference] [--runs DIR] [--sim-set sim.sharing=ps]
    .venv/bin/python benchmarks/sim-validation/spread.py --real-seeds 3   # also runs the testbed for real (quiet machine)
    .venv/bin/python benchmarks/sim-validation/spread.py --real-seeds 3 --real-from DIR  # real runs already made there

Runs testbed.yaml under BSP at W = 4, 8, 16 with loopback links on the simulator, every role on one
host of 2 cores (`sim.hosts: {box: {cores: 2}}`, costs from `--profile`), and measures each run's
release spread as explain.py measures a real one (per clock, the first worker's step to the last
one's, median over clocks). The real figures are read from misses.md (explain.py's table of the
testbed's runs): their cells w{W}-bsp-none-loopback. With --real-seeds N the real side is measured
again instead: the same cells run for real now (`psgd launch`, loopback, as validate.py runs them), seeds
0..N-1, the median over seeds (with --real-from DIR, read from the runs an earlier --real-seeds left in
DIR: DIR/w{W}-s{seed}); the simulated side then runs the same seeds. Simulated figures are labelled so.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from explain import release_spread_ms  # noqa: E402

WITHIN = 0.30


def real_spreads() -> dict[int, float]:
    """W: the real release spread (ms) of cell w{W}-bsp-none-loopback in misses.md."""
    out = {}
    for line in (HERE / "misses.md").read_text().splitlines():
        m = re.match(r"\| w(\d+)-bsp-none-loopback \| [^|]* \| ([\d.]+) / ([\d.]+) \|", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def measured_spreads(runs: Path, seeds: int, made: Optional[Path] = None) -> dict[int, list[float]]:
    """W: the real release spread (ms) of each seed, each run now on this machine (`made`: read
    from the runs already in that directory instead)."""
    import testbed_runs as bed

    from psgd.bench.shaped_net import LinkShape
    out = {}
    for workers in (4, 8, 16):
        cell = bed.Cell(workers, "bsp", "none", "loopback")
        spreads = [release_spread_ms(made / f"w{workers}-s{seed}" if made is not None else
                                     bed.run_real(HERE / "testbed.yaml", cell, seed, LinkShape(100.0),
                                                  runs / "real" / f"w{workers}-s{seed}"), workers)
                   for seed in range(seeds)]
        out[workers] = spreads
    return out


def simulated_spread_ms(out: Path, workers: int, seed: int, profile: str, sim_sets: list[str]) -> float:
    from psgd.cli import main as psgd
    sets = [f"cluster.workers={workers}", "consistency.mode=bsp", f"run.seed={seed}", "sim.hosts={box: {cores: 2}}",
            f"sim.host_profile={profile}", "eval.enabled=false", "train.target_accuracy=null", *sim_sets]
    if psgd(["launch", str(HERE / "testbed.yaml"), "--on", "sim", "--out", str(out), "--quiet",
             *[a for s in sets for a in ("--set", s)]]) != 0:
        raise RuntimeError(f"the simulated run into {out} failed")
    return release_spread_ms(out, workers)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-reference", help="sim.host_profile (a shipped name or a file)")
    ap.add_argument("--runs", type=Path, default=Path("/tmp/psgd-spread"))
    ap.add_argument("--sim-set", action="append", default=[], metavar="KEY=VALUE",
                    help="another config key for the simulated runs (repeatable), e.g. sim.sharing=ps")
    ap.add_argument("--real-seeds", type=int, default=0,
                    help="run the real cells again now with this many seeds (needs a quiet machine) instead of "
                         "reading misses.md")
    ap.add_argument("--real-from", type=Path, default=None, metavar="DIR",
                    help="with --real-seeds: read the real runs an earlier --real-seeds made (its RUNS/real)")
    ap.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="also write spread-report.md (the table) and spread-results.json (every seed's figures) here")
    args = ap.parse_args(argv)
    if args.real_from is not None and not args.real_seeds:
        ap.error("--real-from needs --real-seeds N (the seeds to read)")
    import json
    import statistics
    seeds = list(range(args.real_seeds)) if args.real_seeds else [0]
    real = (measured_spreads(args.runs, args.real_seeds, args.real_from) if args.real_seeds
            else {w: [v] for w, v in real_spreads().items()})
    source = ("misses.md" if not args.real_seeds else f"median of {args.real_seeds} seeds, "
              + (f"runs in {args.real_from}" if args.real_from is not None else "measured now"))
    stated = "".join(f", {s}" for s in args.sim_set)
    lines = [f"| W | real spread (ms, {source}) | simulated spread (ms, 2-core host, {args.profile}{stated}) "
             "| sim / real | within ±30% |", "|---|---|---|---|---|"]
    print("\n".join(lines))
    results = []
    for workers in (4, 8, 16):
        sims = [simulated_spread_ms(args.runs / f"w{workers}-s{seed}", workers, seed, args.profile, args.sim_set)
                for seed in seeds]
        real_ms, sim_ms = statistics.median(real[workers]), statistics.median(sims)
        ratio = sim_ms / real_ms
        results.append({"workers": workers, "seeds": seeds, "real_ms": real[workers], "simulated_ms": sims,
                        "ratio_of_medians": round(ratio, 4), "within": abs(ratio - 1) <= WITHIN})
        lines.append(f"| {workers} | {real_ms:.1f} | {sim_ms:.2f} | {ratio:.2f} | {'yes' if results[-1]['within'] else 'no'} |")
        print(lines[-1])
    if args.out is not None:
        command = "python benchmarks/sim-validation/spread.py " + " ".join(argv if argv is not None else sys.argv[1:])
        (args.out / "spread-report.md").write_text(
            "# The BSP release spread, real against simulated (simulated figures labelled so)\n\n"
            f"Produced by `{command}`.\n\n" + "\n".join(lines) + "\n")
        (args.out / "spread-results.json").write_text(json.dumps(
            {"profile": args.profile, "sim_set": args.sim_set, "real_source": source, "cells": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
