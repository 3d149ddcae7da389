"""`psgd tune staleness`: which SSP bound reaches the target soonest, with
seeds, intervals and the one verdict rule (psgd.bench.verdict.judge).

On the virtual cluster each bound first runs GRID_SEEDS seeds at each rate of a
small grid and keeps its best rate; a best rate at an end of the grid gets one
more point beyond that end (tune_caveats.rate_beyond); the fastest held time
there sets the evaluation spacing of the seeds that follow (tune_setup). Then every bound
runs `min_seeds` seeds, and more seeds rung by rung up to `seeds`; a bound
stops only when judged slower than the fastest, so bounds that cannot be told
apart advance together (tune_halving). The recommendation is the smallest
bound tied with the fastest, in words taken from the verdicts.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from psgd.bench.convergence import BenchResult, ModeSpec, run_matrix, target_spec, write_outputs
from psgd.bench.convergence_report import outcome_of
from psgd.bench.outcomes import best_lr, resolution_check
from psgd.bench.stats import median_ci, significant
from psgd.bench.tune_caveats import TuneCaveats, grid_edge, never_bind_from, rate_beyond
from psgd.bench.tune_halving import HalvingResult, label_of, median_time, recommend_bound, run_halving
from psgd.bench.tune_plot import BY_BOUND_PLOT, plot_by_bound
from psgd.bench.tune_setup import EVALS_PER_SPAN, EVALS_PER_TARGET, eval_spacing_s, rate_grid, sim_overrides
from psgd.config import load_config
from psgd.config.modes import Mode
from psgd.core.sharding import Layout

__all__ = ["parse_bounds", "TuneResult", "run_tune", "staleness_table", "resolution_line", "write_tune_outputs",
           "GRID_SEEDS", "TuneOutputs", "tune_caveats"]

GRID_SEEDS = 2   # a rate is chosen on the median of this many seeds, never on one


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
    rates: dict[int, float] = field(default_factory=dict)      # bound -> the rate its seeds ran at
    grid: list[float] = field(default_factory=list)            # the rates each bound tried (empty: no grid)
    grid_times: dict[int, dict[float, Optional[float]]] = field(default_factory=dict)  # bound -> lr -> held time
    shared: list[str] = field(default_factory=list)  # settings the tuner fixed for every run
    simulated: bool = False
    eval_every_s: Optional[float] = None             # the spacing set from the grid's time to target
    caveats: TuneCaveats = field(default_factory=TuneCaveats)

    @property
    def never_binding(self) -> list[int]:
        """The bounds that never made a worker wait (tune_caveats.never_bind_from)."""
        start = self.caveats.never_bind_from
        return [] if start is None else sorted(b for b in self.halving.outcomes if b >= start)

    @property
    def unit(self) -> str:
        return " simulated s" if self.simulated else " s"


def run_tune(config_path: str, overrides: list[str], bounds: list[int], seeds: int, out_dir: Path,
             min_seeds: int = 1, eta: int = 2, on_run: Callable[[str], None] = lambda m: None,
             child_main: Optional[Callable[[list[str]], int]] = None,
             lr_grid: Optional[list[float]] = None) -> TuneResult:
    base = load_config(config_path, overrides)
    target = target_spec(base)
    if target is None:
        raise ValueError("the config sets no target: give train.target or --target-accuracy")
    simulated = base.cluster.launcher == "sim"
    shared = sim_overrides(base, lambda: _measure(base))
    overrides = [*overrides, *shared]
    all_runs, failed = [], []

    def spec_of(bound: int) -> ModeSpec:
        return ModeSpec(label_of(bound), Mode.SSP, bound)

    # Each bound's rate: a grid on GRID_SEEDS seeds, on the simulator (or wherever --lr-grid is given).
    grid = rate_grid(base.optimizer.lr, lr_grid) if (simulated or lr_grid) else []
    rates = {b: base.optimizer.lr for b in bounds}
    grid_times: dict[int, dict[float, Optional[float]]] = {}
    edges: dict[int, str] = {}
    extended: dict[int, float] = {}
    every = None
    if grid:
        def run_grid(specs, lrs, name):
            res = run_matrix(config_path, overrides, specs, list(range(GRID_SEEDS)), Path(out_dir) / name,
                             lrs=lrs, on_run=on_run, child_main=child_main)
            failed.extend(f"rate grid: {f}" for f in res.failed)
            return [outcome_of(r, target) for r in res.runs]
        outcomes = run_grid([spec_of(b) for b in bounds], grid, "rate-grid")
        best = best_lr(outcomes, target.higher_is_better)
        beyond: dict[float, list[int]] = {}
        for b in bounds:
            end = grid_edge(best.get(label_of(b), base.optimizer.lr), grid)
            if end and label_of(b) in best:
                extended[b] = rate_beyond(grid, end)
                beyond.setdefault(extended[b], []).append(b)
        for lr, bs in beyond.items():
            outcomes += run_grid([spec_of(b) for b in bs], [lr], f"rate-grid-{lr:g}")
        best = best_lr(outcomes, target.higher_is_better)
        for b in bounds:
            rates[b] = best.get(label_of(b), base.optimizer.lr)
            tried = sorted({o.lr for o in outcomes if o.label == label_of(b)})
            grid_times[b] = {lr: _median_held([o for o in outcomes if o.label == label_of(b) and o.lr == lr])
                             for lr in tried}
            if grid_edge(rates[b], tried):
                edges[b] = grid_edge(rates[b], tried)
        held = [o.time_to_target_s for o in outcomes if o.time_to_target_s is not None]
        every = eval_spacing_s(min(held)) if held and base.eval.enabled else None
        if every is not None:
            overrides = [*overrides, f"eval.every_s={every}"]

    def run_arm(bound: int, offsets: list[int]):
        res = run_matrix(config_path, [*overrides, f"optimizer.lr={rates[bound]}"], [spec_of(bound)], offsets,
                         out_dir, on_run=on_run, child_main=child_main)
        all_runs.extend(res.runs)
        failed.extend(res.failed)
        return [outcome_of(r, target) for r in res.runs]

    halving = run_halving(bounds, seeds, run_arm, min_seeds, eta)
    gaps: dict[int, list[Optional[int]]] = {}
    for r in all_runs:
        gaps.setdefault(int(r.summary.get("staleness") or 0), []).append(r.summary.get("max_clock_gap"))
    free_from, identical = never_bind_from(halving.outcomes, gaps)
    caveats = TuneCaveats(free_from, identical, edges, extended)
    bound, why = recommend_bound(halving, caveats.lines())
    bench = BenchResult(Path(out_dir), all_runs, failed, target)
    if every is not None:  # the spacing from the grid's time to target replaces the step-budget one
        shared = [s for s in shared if not s.startswith("eval.every_s=")] + [f"eval.every_s={every}"]
    return TuneResult(bench, halving, bound, why, len(bounds) * seeds, rates, grid, grid_times, shared, simulated,
                      every, caveats)


def _median_held(runs) -> Optional[float]:
    """Median held time to target of a rate's seeds (None where it is not reached)."""
    if not runs:
        return None
    t = median_ci([o.time_to_target_s if o.time_to_target_s is not None else float("inf") for o in runs]).median
    return None if t == float("inf") else t


def _inf(v: Optional[float]) -> float:
    return float("inf") if v is None else v


def _measure(cfg) -> tuple[float, Layout]:
    """(the step time in ms as a launch resolves it, and the model's layout over the shards)."""
    import torch

    from psgd.sim.compute import resolve_compute
    from psgd.sim.plan import model_plans
    from psgd.tasks import load_task
    torch.set_num_threads(cfg.run.threads)  # as the runs will
    task = load_task(cfg, None, splits=("train",))
    return resolve_compute(cfg, task).compute_ms, model_plans(cfg, task)[0]


def staleness_table(t: TuneResult) -> str:
    target = t.bench.target
    unit = t.unit.strip()
    lines = [f"| bound s | lr | seeds run | held {target.text} | time to target, median [95% CI] | per seed ({unit}) | "
             "stopped |", "|---|---|---|---|---|---|---|"]
    last = len(t.halving.rungs) - 1
    for b, outs in t.halving.outcomes.items():
        times = [o.time_to_target_s for o in outs]
        iv = median_ci([x if x is not None else float("inf") for x in times]) if outs else None
        per = ", ".join("n.h." if x is None else significant(x) for x in times)
        stopped = (f"after rung {t.halving.stopped_at[b]}" if b in t.halving.stopped_at
                   else f"finalist (rung {last})")
        lines.append(f"| {b} | {t.rates.get(b, outs[0].lr if outs else float('nan')):g} | {len(outs)} | {sum(x is not None for x in times)}/{len(outs)} | "
                     f"{iv.time_text(t.unit) if iv else '—'} | {per} | {stopped} |")
    return "\n".join(lines)


def _resolution(t: TuneResult) -> tuple[str, bool]:
    """(the sentence, whether the evaluations are dense enough to tell the bounds
    apart): their median spacing against the fastest bound's median time to target."""
    fastest = min((median_time(outs) for outs in t.halving.outcomes.values() if outs), default=float("inf"))
    spacing, ok = resolution_check([[float(e["t"]) for e in r.training_evals] for r in t.bench.runs], fastest)
    if spacing == float("inf") or fastest == float("inf"):
        return "Time resolution: not measurable (too few evaluations, or no bound held the target).", False
    return (f"Time resolution: evaluations every {significant(spacing)}{t.unit} (median spacing), "
            f"{spacing / fastest:.1%} of the fastest bound's median time to target" + (" (within 5%)." if ok else
            ": differences under two evaluation periods are not resolved; lower eval.every_s to resolve them.")), ok


def resolution_line(t: TuneResult) -> str:
    return _resolution(t)[0]


def tune_caveats(t: TuneResult) -> list[str]:
    """What limits the recommendation, in the sentences tune.md and the terminal both print:
    what the tuner saw (tune_caveats.TuneCaveats: bounds that never bind, rates at a grid's end),
    then the resolution, the seeds and the cap."""
    out = t.caveats.lines()
    text, ok = _resolution(t)
    if not ok:
        out.append(text)
    if max((len(v) for v in t.halving.outcomes.values()), default=0) == 1:
        out.append("Only one seed per bound: the intervals are single points, so no difference is statistically "
                   "supported; run with --seeds 3 or more.")
    if "decided by the cap" in t.why:
        out.append("Some verdicts are decided by the cap: they rest on seeds that did not hold the target, censored "
                   "at their run's end.")
    return out


def rates_text(t: TuneResult) -> str:
    """Which rate each bound ran at, and from what."""
    if not t.grid:
        return f"Learning rate: {next(iter(t.rates.values())):g} as configured, for every bound (no rate grid)."
    per = "; ".join(
        f"s={b}: {t.rates[b]:g}" + (f" (the {t.caveats.rates_at_edge[b]} end of the grid"
                                    + (", extended by one point" if b in t.caveats.extended else "") + ")"
                                    if b in t.caveats.rates_at_edge else "")
        + " [" + ", ".join(f"{lr:g}: " + ("n.h." if v is None else significant(v)) for lr, v in sorted(t.grid_times[b].items()))
        + "]" for b in t.rates)
    return (f"Learning rate: each bound at its best rate of the grid {', '.join(f'{lr:g}' for lr in t.grid)} "
            f"({GRID_SEEDS} seeds each, lowest median held time to target; a best rate at an end of the grid "
            f"tries one more point beyond it): {per}.")


def _grid_runs(t: TuneResult) -> int:
    return GRID_SEEDS * sum(len(v) for v in t.grid_times.values())


@dataclass(frozen=True)
class TuneOutputs:
    table: str
    lines: str              # the recommendation, its cost, the resolution and the rates
    caveats: list[str]
    files: list[Path]       # every file written (run directories aside)


def write_tune_outputs(t: TuneResult, config_text: str, command: str, setting: list[str]) -> TuneOutputs:
    """Writes tune.md, tune.csv and the by-bound chart (plus the bench report, CSVs
    and plots) into the output directory."""
    out = t.bench.out_dir
    report, summary_csv, plots = write_outputs(t.bench, f"SSP staleness bounds, target {t.bench.target.text}",
                                               config_text, command, setting)
    chart = plot_by_bound(t.halving.outcomes, out / BY_BOUND_PLOT,
                          f"Held time to {t.bench.target.text} by SSP bound", t.unit.strip(), t.never_binding)
    table = staleness_table(t)
    with open(out / "tune.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bound", "lr", "seeds", "held", "time_to_target_median_s", "time_to_target_ci_low_s",
                    "time_to_target_ci_high_s", "stopped_after_rung"])
        for b, outs in t.halving.outcomes.items():
            iv = median_ci([o.time_to_target_s if o.time_to_target_s is not None else float("inf")
                            for o in outs]) if outs else None
            w.writerow([b, t.rates.get(b, ""), len(outs), sum(o.time_to_target_s is not None for o in outs),
                        iv.median if iv else "", iv.low if iv else "", iv.high if iv else "",
                        t.halving.stopped_at.get(b, "")])
    line = (f"recommended bound: {t.bound} — {t.why}" if t.bound is not None else f"no recommendation: {t.why}")
    if t.halving.stopped_at:  # the verdicts that separated bounds before the last rung
        line += "\nSlower than the fastest, so stopped: " + "; ".join(
            f"s={b} after rung {r} ({median_ci([_inf(o.time_to_target_s) for o in t.halving.outcomes[b]]).time_text(t.unit)})"
            for b, r in sorted(t.halving.stopped_at.items())) + "."
    cost = (f"The seeds ran {t.halving.runs} runs (rungs: "
            + ", ".join(f"{r.arms} bounds x {r.seeds} seeds" for r in t.halving.rungs)
            + f"; a bound stops only when judged slower than the fastest) against {t.full_grid_runs} for every "
            "bound x seed" + (f", after {_grid_runs(t)} rate-grid runs." if t.grid else "."))
    resolution = resolution_line(t)
    fixed = [rates_text(t)]
    if t.shared:
        spacing = (f"evaluations every 1/{EVALS_PER_TARGET} of the fastest held time the rate grid saw"
                   if t.eval_every_s is not None else f"evaluations at least {EVALS_PER_SPAN} per compute span")
        fixed.append("Every simulated run shares: " + ", ".join(f"`{s}`" for s in t.shared) + " (the step time "
                     f"measured once; runs stop once the target is held; {spacing}; an evaluation costs no "
                     "simulated time).")
    caveats = tune_caveats(t)
    text = [f"# Staleness tuning, target {t.bench.target.text}", "", f"Command: `{command}`", "", line, "",
            *[x for c in caveats for x in (f"- {c}", "")], cost, "", resolution, "",
            *[x for f in fixed for x in (f, "")], table, "", f"![held time to target by bound]({chart.name})", "",
            "Held: " + t.bench.target.rule_text + ".", ""]
    text += [f"- {s}" for s in setting] + [""]
    if t.bench.failed:
        text += ["Failed runs:", ""] + [f"- {f}" for f in t.bench.failed] + [""]
    text += ["Per-mode details and plots: [report.md](report.md).", ""]
    md = out / "tune.md"
    md.write_text("\n".join(text))
    seeds_csv = [out / "seeds.csv"] if (out / "seeds.csv").is_file() else []
    return TuneOutputs(table, "\n".join([line, cost, resolution, *fixed]), caveats,
                       [md, out / "tune.csv", chart, report, summary_csv, *seeds_csv, *plots])
