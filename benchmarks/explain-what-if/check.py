"""Is `psgd explain --what-if` right? Its prediction for a change, checked by running the change for real.

    .venv/bin/python benchmarks/explain-what-if/check.py [--seeds 3] [--out benchmarks/explain-what-if] \\
        [--set KEY=VALUE ...]

(real timings: run it on a quiet machine.) On configs/quickstart.yaml under BSP with
`workers.slowdown={3: 4.0}` (issue 51's run; `--set` changes it further):
1. one real run (seed 0), the run `psgd explain` is asked about;
2. `what_if` on it for `consistency.backup_workers=1` over --seeds seeds: the
   calibration, its reproduction of the run, and the simulated time to target of
   the baseline and of the change;
3. the change run for real over the same seeds.
Within when the real median time to target is within ±25% (MARGIN) of the
predicted (simulated) median. Writes results.json and report.md to --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from psgd.bench.what_if import what_if
from psgd.config import load_config
from psgd.orchestrate.api import LaunchError, launch

ROOT = Path(__file__).resolve().parents[2]
RUN = ["consistency.mode=bsp", "workers.slowdown={3: 4.0}", "eval.every_s=0.25"]  # time to target to 0.25 s
CHANGE = "consistency.backup_workers=1"
MARGIN = 0.25


def _real(overrides: list[str], seed: int, out: Path):
    try:
        summary = launch(load_config(ROOT / "configs" / "quickstart.yaml", [*overrides, f"run.seed={seed}"]),
                         out=str(out))
    except LaunchError as exc:  # a run that stopped at its cap: its summary still says so
        summary = exc.summary
    return {"seed": seed, "time_to_target_s": summary.get("time_to_target_s"), "wall_time_s": summary["wall_time_s"],
            "run_dir": str(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    overrides = [*RUN, *args.overrides]
    with tempfile.TemporaryDirectory(prefix="psgd-what-if-check-") as tmp:
        tmp = Path(tmp)
        asked = _real(overrides, 0, tmp / "asked")
        report = what_if(Path(asked["run_dir"]), [CHANGE], tmp / "sim", seeds=args.seeds)
        predicted = report.changes[0]
        real = [_real([*overrides, CHANGE], predicted.seeds[k], tmp / f"change-s{k}") for k in range(args.seeds)]
    real_times = [r["time_to_target_s"] for r in real]
    real_median = statistics.median(real_times) if None not in real_times else None
    sim_median = predicted.median_time_s
    error = real_median / sim_median - 1 if real_median and sim_median else None
    result = {"config": "configs/quickstart.yaml", "overrides": overrides, "change": CHANGE, "seeds": args.seeds,
              "asked_run": asked, "what_if": report.as_dict(), "real_change": real,
              "real_median_time_to_target_s": real_median, "simulated_median_time_to_target_s": sim_median,
              "error": error, "margin": MARGIN, "within": error is not None and abs(error) <= MARGIN}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    base = report.baseline.median_time_s
    lines = ["# `psgd explain --what-if` checked against the change run for real", "",
             f"Run asked about: configs/quickstart.yaml with {' '.join(overrides)} (seed 0): time to target "
             f"{_s(asked['time_to_target_s'])} (real).",
             f"Calibration reproduces it within ±{report.reproduction.margin:.0%}: "
             + ("yes" if not report.reproduction.misses() else "no: " + "; ".join(report.reproduction.misses())) + ".",
             f"Predicted (simulated, seeds {list(predicted.seeds)}): baseline median {_s(base)}, `{CHANGE}` median "
             f"{_s(sim_median)}; verdict {predicted.judgement.text()}.",
             f"The change run for real, same seeds: times {[_s(t) for t in real_times]}, median {_s(real_median)}.",
             f"Real against predicted: {'n/a' if error is None else f'{error:+.0%}'} "
             f"({'within' if result['within'] else 'outside'} ±{MARGIN:.0%}).", "",
             "Command: `.venv/bin/python benchmarks/explain-what-if/check.py --seeds "
             f"{args.seeds}{''.join(f' --set {o}' for o in args.overrides)}` (a quiet machine: real timings)."]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if result["within"] else 1


def _s(x) -> str:
    return "not reached" if x is None else f"{x:.2f} s"


if __name__ == "__main__":
    raise SystemExit(main())
