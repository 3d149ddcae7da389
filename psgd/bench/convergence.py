"""`psgd bench convergence`: the same task under several consistency modes and
seeds, one run after another, then report.md, summary.csv and plots.

A mode is written as on the command line: `allreduce`, `bsp`, `ssp:S`, `asp`,
and any PS mode with `+sa` for staleness-aware steps (e.g. `asp+sa`). Each run
is a normal `psgd launch` run (its own run directory under OUT/runs), so the
figures come from the same summary and metrics any run leaves behind.
"""
from __future__ import annotations

import csv
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from psgd.config import PS_MODES, Config, load_config
from psgd.launch.launcher import Launcher
from psgd.bench.plots import plot_runs
from psgd.bench.run_data import RunData, group_by_label, load_run

__all__ = ["ModeSpec", "parse_modes", "run_matrix", "BenchResult", "write_report", "mode_table",
           "train_time_s", "CSV_FIELDS"]



@dataclass(frozen=True)
class ModeSpec:
    label: str
    mode: str
    staleness: Union[int, str] = 0   # "auto": the adaptive bound
    staleness_aware: bool = False

    @property
    def overrides(self) -> list[str]:
        return [f"consistency.mode={self.mode}", f"consistency.staleness={self.staleness}",
                f"optimizer.staleness_aware={'true' if self.staleness_aware else 'false'}"]

    @property
    def dir_name(self) -> str:
        return self.label.replace(":", "").replace("+", "-")


def parse_modes(text: str) -> list[ModeSpec]:
    """'allreduce,bsp,ssp:2,asp+sa' -> specs. Raises ValueError naming the bad item."""
    specs = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        base, plus, suffix = item.partition("+")
        if plus and suffix != "sa":
            raise ValueError(f"--modes: {item!r}: the only suffix is '+sa' (staleness-aware steps)")
        name, colon, bound = base.partition(":")
        if name not in PS_MODES + ("allreduce",):
            raise ValueError(f"--modes: {item!r}: mode must be allreduce, bsp, ssp:S or asp")
        if name == "allreduce" and plus:
            raise ValueError(f"--modes: {item!r}: '+sa' needs a parameter-server mode (all-reduce has no staleness)")
        if (name == "ssp") != bool(colon):
            raise ValueError(f"--modes: {item!r}: ssp needs a bound (ssp:S), other modes take none")
        if colon and not (bound.isdigit() or bound == "auto"):
            raise ValueError(f"--modes: {item!r}: the bound must be an integer >= 0 or auto")
        specs.append(ModeSpec(item, name, (bound if bound == "auto" else int(bound)) if colon else 0, bool(plus)))
    if not specs:
        raise ValueError("--modes: give at least one mode")
    if len({s.label for s in specs}) != len(specs):
        raise ValueError("--modes: a mode is listed twice")
    return specs


@dataclass
class BenchResult:
    out_dir: Path
    runs: list[RunData]
    failed: list[str]          # "label seed N: reason"
    target: Optional[float]


def run_matrix(config_path: str, overrides: list[str], specs: list[ModeSpec], seeds: int, out_dir: Path,
               on_run: Callable[[str], None] = lambda msg: None) -> BenchResult:
    """Run every (mode, seed) in turn. Blocks; a failed run is recorded, not raised.
    Raises ConfigError up front if any (mode, seed) config is invalid."""
    out_dir = Path(out_dir)
    base = load_config(config_path, overrides)
    plan: list[tuple[ModeSpec, int, list[str], Config]] = []
    for spec in specs:
        for k in range(seeds):
            seed = base.run.seed + k
            sets = list(overrides) + spec.overrides + [f"run.seed={seed}"]
            plan.append((spec, seed, sets, load_config(config_path, sets)))
    runs, failed = [], []
    for i, (spec, seed, sets, cfg) in enumerate(plan, 1):
        run_dir = out_dir / "runs" / f"{spec.dir_name}-seed{seed}"
        run_dir.mkdir(parents=True, exist_ok=True)
        on_run(f"[{i}/{len(plan)}] {spec.label} seed {seed} -> {run_dir}")
        t = time.monotonic()
        result = Launcher(cfg, run_dir).run()
        if result.code != 0:
            failed.append(f"{spec.label} seed {seed}: {result.reason}")
            on_run(f"    failed: {result.reason}")
            if result.code >= 128:  # interrupted by the user: stop the whole bench
                break
            continue
        run = load_run(run_dir)
        run.label = spec.label
        runs.append(run)
        s = run.summary
        on_run(f"    accuracy {_fmt(s.get('final_test_accuracy'), 4)}, time to target "
               f"{_fmt(s.get('time_to_target_s'), 2)}, {s.get('total_updates')} updates "
               f"({time.monotonic() - t:.0f}s with start-up)")
    return BenchResult(out_dir, runs, failed, base.train.target_accuracy)


def train_time_s(run: RunData) -> float:
    """Training time: the last worker step's time (the summary's wall time also
    counts processes exiting, which is not training)."""
    return max((float(e["t"]) for e in run.steps), default=0.0)


CSV_FIELDS = ["label", "mode", "staleness", "staleness_aware", "seed", "status", "train_time_s", "wall_time_s",
              "total_updates", "updates_per_s", "worker_steps", "final_test_accuracy", "final_test_loss",
              "final_train_loss", "target_accuracy", "time_to_target_s", "staleness_mean", "staleness_max",
              "max_clock_gap", "rejected_updates", "run_dir"]


def _csv_row(run: RunData, out_dir: Path) -> dict:
    s = run.summary
    t = train_time_s(run)
    row = {k: s.get(k) for k in CSV_FIELDS}
    row.update(label=run.label, staleness_aware=run.label.endswith("+sa"), train_time_s=round(t, 3),
               updates_per_s=round(s.get("total_updates", 0) / t, 2) if t > 0 else 0.0,
               run_dir=str(_relative(run.run_dir, out_dir)))
    return row


def _relative(path: Path, base: Path) -> Path:
    try:
        return Path(path).resolve().relative_to(Path(base).resolve())
    except ValueError:
        return Path(path)


def _fmt(v, digits=2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "not reached"
    return f"{v:.{digits}f}"


def _median_range(values: list[float], digits: int) -> str:
    """'median [min–max]' over seeds; inf (target not reached) sorts last."""
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return _fmt(med, digits)
    lo, hi = min(values), max(values)
    hi_text = "n.r." if math.isinf(hi) else f"{hi:.{digits}f}"
    return f"{_fmt(med, digits)} [{lo:.{digits}f}–{hi_text}]" if not math.isinf(lo) else f"{_fmt(med, digits)}"


def mode_table(runs: list[RunData], target: Optional[float]) -> str:
    """The per-mode markdown table: medians with [min–max] over seeds."""
    tgt = f"{target:g}" if target is not None else "—"
    lines = [f"| mode | seeds | time to {tgt} (s) | reached | final accuracy | updates/s | staleness mean | staleness max |",
             "|---|---|---|---|---|---|---|---|"]
    for label, group in group_by_label(runs).items():
        ttt = [r.summary.get("time_to_target_s") for r in group]
        ttt_vals = [float(v) if v is not None else math.inf for v in ttt]
        acc = [r.summary["final_test_accuracy"] for r in group if r.summary.get("final_test_accuracy") is not None]
        ups = [r.summary.get("total_updates", 0) / train_time_s(r) for r in group if train_time_s(r) > 0]
        st_mean = [float(r.summary.get("staleness_mean", 0.0)) for r in group]
        st_max = [float(r.summary.get("staleness_max", 0)) for r in group]
        reached = sum(v is not None for v in ttt)
        lines.append(f"| {label} | {len(group)} | {_median_range(ttt_vals, 2) if target is not None else '—'} | "
                     f"{reached}/{len(group)} | {_median_range(acc, 4)} | {_median_range(ups, 0)} | "
                     f"{_median_range(st_mean, 2)} | {_median_range(st_max, 0)} |")
    return "\n".join(lines)


def write_outputs(result: BenchResult, title: str, config_text: str, command: str,
                  notes: str = "") -> tuple[Path, Path, list[Path]]:
    """Write summary.csv, the plots and report.md into result.out_dir."""
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "summary.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for run in result.runs:
            w.writerow(_csv_row(run, out))
    plots = plot_runs(result.runs, out, title, result.target) if result.runs else []
    report = out / "report.md"
    report.write_text(write_report(result, title, config_text, command, plots, notes))
    return report, csv_path, plots


def write_report(result: BenchResult, title: str, config_text: str, command: str, plots: list[Path],
                 notes: str = "") -> str:
    parts = [f"# Convergence: {title}", "",
             f"Command: `{command}`", "",
             "Medians over seeds, with [min–max]. Time to target is the first evaluation at or above "
             "the target (n.r.: not reached in that seed); updates/s counts model updates per second of "
             "training (until the last worker step).", "",
             mode_table(result.runs, result.target), ""]
    if result.failed:
        parts += ["Failed runs:", ""] + [f"- {f}" for f in result.failed] + [""]
    if notes:
        parts += [notes, ""]
    for p in plots:
        parts += [f"![{p.stem}]({p.name})", ""]
    parts += ["Resolved base config (each run's own config.yaml is in its run directory):", "",
              "```yaml", config_text.rstrip(), "```", ""]
    return "\n".join(parts)
