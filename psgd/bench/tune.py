"""`psgd tune staleness`: which SSP bound reaches the target soonest, with
seeds, intervals and successive halving.

Every bound first runs with `min_seeds` seeds; after each rung the slower half
(by median held time to target) stops and the rest get more seeds, until the
finalists have `seeds` each (see stats.halving_schedule), so the tuner costs
fewer runs than every bound x every seed. It then recommends the smallest
finalist bound whose interval is indistinguishable from the fastest one's, or
says that the finalists are indistinguishable.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from psgd.bench.convergence import BenchResult, ModeSpec, run_matrix, target_spec, write_outputs
from psgd.bench.convergence_report import outcome_of
from psgd.bench.outcomes import resolution_check
from psgd.bench.stats import median_ci, schedule_runs
from psgd.bench.tune_halving import HalvingResult, median_time, recommend_bound, run_halving
from psgd.bench.tune_setup import PROBE_FRACTION, RateCheck, check_rate, sim_overrides
from psgd.config import load_config
from psgd.config.modes import Mode

__all__ = ["parse_bounds", "TuneResult", "run_tune", "staleness_table", "resolution_line", "write_tune_outputs"]


def parse_bounds(text: str) -> list[int]:
    try:
        bounds = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ValueError(f"--bounds: expected comma-separated integers, got {text!r}") from None
    if not bounds or any(b < 0 for b in bounds):
        raise ValueError(f"--bounds: need at least one bound, all >= 0, got {text!r}")
    if len(set(bounds)) != len(bounds):
        raise ValueError("--bounds: a bound is listed twice")
    return sorted(bounds)


@dataclass
class TuneResult:
    bench: BenchResult
    halving: HalvingResult
    bound: Optional[int]
    why: str
    full_grid_runs: int
    rate: Optional[RateCheck] = None
    shared: list[str] = field(default_factory=list)  # settings the tuner fixed for every run


def run_tune(config_path: str, overrides: list[str], bounds: list[int], seeds: int, out_dir: Path,
             min_seeds: int = 1, eta: int = 2, on_run: Callable[[str], None] = lambda m: None,
             child_main: Optional[Callable[[list[str]], int]] = None) -> TuneResult:
    base = load_config(config_path, overrides)
    target = target_spec(base)
    if target is None:
        raise ValueError("the config sets no target: give train.target or --target-accuracy")
    shared = sim_overrides(base, lambda: _measure(base))
    overrides = [*overrides, *shared]
    all_runs, failed = [], []
    loosest = max(bounds)

    def spec_of(bound: int) -> ModeSpec:
        return ModeSpec(f"ssp:{bound}", Mode.SSP, bound)

    def probe(lr: float):
        on_run(f"rate check: s={loosest} at lr {lr:g}")
        steps = max(1, base.train.steps_per_worker // PROBE_FRACTION)
        sets = [*overrides, f"optimizer.lr={lr}", f"train.steps_per_worker={steps}"]
        res = run_matrix(config_path, sets, [spec_of(loosest)], [0],
                         Path(out_dir) / "rate-check" / f"lr{lr:g}", on_run=on_run, child_main=child_main)
        return (res.runs[0], res.runs[0].training_evals) if res.runs else (None, [])

    # On the simulator a probe costs seconds; on real processes the configured rate is kept.
    rate = check_rate(base.optimizer.lr, probe) if base.cluster.launcher == "sim" else None
    if rate is not None:
        overrides = [*overrides, f"optimizer.lr={rate.lr}"]

    def run_arm(bound: int, offsets: list[int]):
        res = run_matrix(config_path, overrides, [spec_of(bound)], offsets, out_dir, on_run=on_run,
                         child_main=child_main)
        all_runs.extend(res.runs)
        failed.extend(res.failed)
        return [outcome_of(r, target) for r in res.runs]

    halving = run_halving(bounds, seeds, run_arm, min_seeds, eta)
    bound, why = recommend_bound(halving)
    bench = BenchResult(Path(out_dir), all_runs, failed, target)
    return TuneResult(bench, halving, bound, why, len(bounds) * seeds, rate, shared)


def _measure(cfg) -> tuple[float, int]:
    """(the step time in ms as a launch resolves it, and the model's trainable parameter count)."""
    import torch

    from psgd.sim.compute import resolve_compute
    from psgd.tasks import build_model, load_task
    torch.set_num_threads(cfg.run.threads)  # as the runs will
    task = load_task(cfg, None, splits=("train",))
    numel = sum(p.numel() for p in build_model(cfg, task).parameters() if p.requires_grad)
    return resolve_compute(cfg, task).compute_ms, numel


def staleness_table(t: TuneResult) -> str:
    target = t.bench.target
    lines = [f"| bound s | seeds run | held {target.text} | time to target, median [95% CI] | per seed (s) | "
             "stopped |", "|---|---|---|---|---|---|"]
    last = len(t.halving.rungs) - 1
    for b, outs in t.halving.outcomes.items():
        times = [o.time_to_target_s for o in outs]
        iv = median_ci([x if x is not None else float("inf") for x in times]) if outs else None
        per = ", ".join("n.h." if x is None else f"{x:.2f}" for x in times)
        stopped = (f"after rung {t.halving.stopped_at[b]}" if b in t.halving.stopped_at
                   else f"finalist (rung {last})")
        lines.append(f"| {b} | {len(outs)} | {sum(x is not None for x in times)}/{len(outs)} | "
                     f"{iv.text(2, ' s') if iv else '—'} | {per} | {stopped} |")
    return "\n".join(lines)


def resolution_line(t: TuneResult) -> str:
    """Whether the evaluations are dense enough to tell the bounds apart: their
    median spacing against the fastest bound's median time to target."""
    fastest = min((median_time(outs) for outs in t.halving.outcomes.values() if outs), default=float("inf"))
    spacing, ok = resolution_check([[float(e["t"]) for e in r.training_evals] for r in t.bench.runs], fastest)
    if spacing == float("inf") or fastest == float("inf"):
        return "Time resolution: not measurable (too few evaluations, or no bound held the target)."
    return (f"Time resolution: evaluations every {spacing:.3f} s (median spacing), {spacing / fastest:.1%} of the "
            f"fastest bound's median time to target" + (" (within 5%)." if ok else
            ": differences under two evaluation periods are not resolved; lower eval.every_s to resolve them."))


def write_tune_outputs(t: TuneResult, config_text: str, command: str, setting: list[str]) -> tuple[str, str, Path]:
    """Writes tune.md and tune.csv (plus the bench report, CSVs and plots) into
    the output directory; returns (table, recommendation line, tune.md path)."""
    out = t.bench.out_dir
    write_outputs(t.bench, f"SSP staleness bounds, target {t.bench.target.text}", config_text, command, setting)
    table = staleness_table(t)
    with open(out / "tune.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bound", "seeds", "held", "time_to_target_median_s", "time_to_target_ci_low_s",
                    "time_to_target_ci_high_s", "stopped_after_rung"])
        for b, outs in t.halving.outcomes.items():
            iv = median_ci([o.time_to_target_s if o.time_to_target_s is not None else float("inf")
                            for o in outs]) if outs else None
            w.writerow([b, len(outs), sum(o.time_to_target_s is not None for o in outs),
                        iv.median if iv else "", iv.low if iv else "", iv.high if iv else "",
                        t.halving.stopped_at.get(b, "")])
    line = (f"recommended bound: {t.bound} — {t.why}" if t.bound is not None else f"no recommendation: {t.why}")
    cost = (f"Successive halving ran {t.halving.runs} runs (schedule "
            + ", ".join(f"{r.arms} bounds x {r.seeds} seeds" for r in t.halving.rungs)
            + f", planned {schedule_runs(t.halving.rungs)}) instead of {t.full_grid_runs} for every bound x seed.")
    resolution = resolution_line(t)
    fixed = []
    if t.rate is not None:
        fixed.append(t.rate.text(max(t.halving.outcomes)))
    if t.shared:
        fixed.append("Every simulated run shares: " + ", ".join(f"`{s}`" for s in t.shared) + " (the step time "
                     "measured once; runs stop once the target is held; evaluations at least 50 per compute span).")
    text = [f"# Staleness tuning, target {t.bench.target.text}", "", f"Command: `{command}`", "", line, "", cost, "",
            resolution, "", *[x for f in fixed for x in (f, "")], table, "", "Held: " + t.bench.target.rule_text + ".", ""]
    text += [f"- {s}" for s in setting] + [""]
    if t.bench.failed:
        text += ["Failed runs:", ""] + [f"- {f}" for f in t.bench.failed] + [""]
    text += ["Per-mode details and plots: [report.md](report.md).", ""]
    md = out / "tune.md"
    md.write_text("\n".join(text))
    return table, "\n".join([line, cost, resolution, *fixed]), md
