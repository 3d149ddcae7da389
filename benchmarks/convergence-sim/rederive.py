"""Re-derives this study's seeds.csv and summary.csv from the runs study.py kept:

    python benchmarks/convergence-sim/rederive.py [STUDY_RUNS]

For every bench folder here that has a seeds.csv, loads the runs of the same
bench under STUDY_RUNS (default /tmp/psgd-simstudy) and writes its seeds.csv and
summary.csv again with today's analysis (psgd.bench.convergence_report), as
`psgd bench convergence` would. It exists because the analysis changed after
runs were made (the evaluations that see the last steps' pushes now count), so
that the runs need not be made again. The rates and caps in design.json stay
those study.py chose.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from psgd.bench.convergence_report import TargetSpec, analyse, write_seeds_csv, write_summary_csv
from psgd.bench.run_data import load_run
from psgd.core.target import TargetHold

HERE = Path(__file__).resolve().parent
MODES = ("bsp", "bsp+b1", "ssp:2", "ssp:8", "asp")


def dir_of(mode: str) -> str:
    return mode.replace(":", "").replace("+", "-")


def label_of(run_dir: str) -> str:
    """A bench's run folder (e.g. bsp-b1-lr0p12-seed0) -> its mode's label (the longest match)."""
    for m in sorted(MODES, key=lambda m: -len(dir_of(m))):
        if run_dir.startswith(dir_of(m) + "-"):
            return m
    raise ValueError(f"rederive: {run_dir} is not a run of {', '.join(MODES)}")


def main(runs_root: Path) -> list[Path]:
    t = yaml.safe_load((HERE / "workload.yaml").read_text())["train"]["target"]
    target = TargetSpec(t["metric"], float(t["value"]), TargetHold(int(t["hold_evals"]), float(t["tolerance"])))
    written = []
    for seeds in sorted(HERE.glob("**/seeds.csv")):
        bench = seeds.parent.relative_to(HERE)
        run_dirs = sorted(p for p in (runs_root / bench / "runs").glob("*") if (p / "summary.json").is_file())
        if not run_dirs:
            continue
        runs = []
        for p in run_dirs:
            run = load_run(p)
            run.label = label_of(p.name)
            runs.append(run)
        a = analyse(runs, target)
        write_seeds_csv(seeds, a)
        write_summary_csv(seeds.parent / "summary.csv", a)
        written.append(seeds)
    return written


if __name__ == "__main__":
    done = main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/psgd-simstudy"))
    print(f"re-derived {len(done)} benches' seeds.csv and summary.csv")
