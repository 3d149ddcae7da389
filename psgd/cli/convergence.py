"""`psgd bench convergence`, `psgd tune staleness` and `psgd plot`: argument parsing and printing around psgd.bench's convergence
code (which neither prints nor parses)."""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from psgd.bench.pyplot import require_matplotlib
from psgd.cli.failures import Fail, expected
from psgd.config import ConfigError, Mode, dump_config, load_config
from psgd.config.task_sources import check_task_sources
from psgd.orchestrate.launchers import launcher_names

__all__ = ["add_convergence_commands", "add_bench_convergence_command"]

DEFAULT_SEEDS = 3
SIM_SEEDS = 5  # seeds are cheap on the virtual cluster


def _on(args) -> list[str]:
    """--on as a config override (recorded in every run's config.yaml)."""
    return [f"cluster.launcher={args.on}"] if args.on else []


def _seeds(given, cfg) -> int:
    if given is not None:
        return given
    return SIM_SEEDS if cfg.cluster.launcher == "sim" else DEFAULT_SEEDS


def _out(args, kind: str, cfg) -> Path:
    if args.out:
        return Path(args.out)
    return Path(cfg.run.out_dir) / f"{kind}-{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _command_line(args) -> str:
    return "psgd " + shlex.join(args.argv)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _written(out: Path, files: list[Path]) -> str:
    """Every file a command wrote, named relative to its output directory."""
    names = [str(p.relative_to(out)) if p.is_relative_to(out) else str(p) for p in files]
    dirs = [f"{d}/ ({n} runs)" for d in ("pilot", "rate-grid", "runs") if (n := _run_count(out / d))]
    return f"wrote into {out}: " + ", ".join(names + dirs)


def _run_count(folder: Path) -> int:
    return sum(1 for p in folder.rglob("summary.json")) if folder.is_dir() else 0


def _check_config_first(command: str, args, overrides: list[str]) -> None:
    """Loads the config and finds its model and dataset before the bench's own imports (scipy, torch, the
    simulator: seconds), so a misspelled key, model or dataset fails at once, one line, exit 2."""
    with expected(command, Fail(ConfigError, 2)):
        check_task_sources(load_config(args.config, overrides))


def _spacing(args, overrides: list[str], specs, cfg, out: Path):
    """The evaluation spacing of the measured runs (psgd.bench.eval_pilot), None without evaluations."""
    from psgd.bench.eval_pilot import Spacing, pilot_eval_spacing, user_sets_spacing
    from psgd.bench.stats import significant
    if not cfg.eval.enabled:
        return None
    if user_sets_spacing(args.overrides):
        unit = " simulated s" if cfg.cluster.launcher == "sim" else " s"
        return Spacing(cfg.eval.every_s, f"Evaluation spacing: every {significant(cfg.eval.every_s)}{unit}, as set "
                                         "with --set eval.every_s (no pilot).")
    return pilot_eval_spacing(args.config, overrides, specs, out, on_run=_progress, child_main=args.child_main)


def cmd_bench_convergence(args: argparse.Namespace) -> int:
    _check_config_first("psgd bench convergence", args, [*args.overrides, *_on(args)])
    from psgd.bench import convergence as bc
    from psgd.bench.convergence_report import caveats, mode_table
    from psgd.bench.outcomes import conclusion
    from psgd.bench.run_checks import StartupError, check_modes
    with expected("psgd bench convergence", Fail((ConfigError, ValueError, StartupError), 2)):
        specs = bc.parse_modes(args.modes)
        if args.baseline != Mode.BSP and args.baseline not in {s.label for s in specs}:
            raise ValueError(f"--baseline {args.baseline!r} is not one of the --modes")
        overrides = [*args.overrides, *_on(args)]
        cfg = load_config(args.config, overrides)
        seeds = _seeds(args.seeds, cfg)
        if seeds < 1:
            raise ValueError("--seeds must be >= 1")
        if args.lr_grid and args.lr_from:
            raise ValueError("give --lr-grid or --lr-from, not both")
        lrs = bc.parse_lr_grid(args.lr_grid) if args.lr_grid else None
        lr_for = bc.read_lr_choice(Path(args.lr_from)) if args.lr_from else None
        problem = bc.inner_rate_problem(cfg, specs) if lrs is None and lr_for is None else None
        if problem:
            raise ValueError(problem)
        if bc.target_spec(cfg) is None:
            raise ValueError("the config sets no target: give train.target (metric, value) or train.target_accuracy")
        require_matplotlib()  # the report's plots: fail now, not after the runs
        check_modes(args.config, overrides, [s.overrides for s in specs])  # model, data, every mode: before any run
    out = _out(args, "bench", cfg)
    print(f"output directory: {out}", file=sys.stderr)
    with expected("psgd bench convergence", Fail((ConfigError, ValueError), 2)):
        spacing = _spacing(args, overrides, specs, cfg, out)
        if spacing is not None:
            print(spacing.text, file=sys.stderr)
            overrides = [*overrides, spacing.override]
            cfg = load_config(args.config, overrides)
        result = bc.run_matrix(args.config, overrides, specs, seeds, out, lrs, lr_for, on_run=_progress,
                               child_main=args.child_main)
    title = args.title or f"{cfg.task.model} on {cfg.task.dataset}, {cfg.cluster.workers} workers"
    setting = bc.setting_lines(cfg, specs, per_mode_rates=bool(lrs or lr_for))
    report, csv_path, plots = bc.write_outputs(result, title, dump_config(cfg), _command_line(args),
                                               setting + ([spacing.text] if spacing else []), baseline=args.baseline)
    a = result.analysis
    if a is not None:
        print("\n".join(conclusion(a.stats, result.target.text, args.baseline, a.unit)))
        print(mode_table(a, args.baseline))
        for line in caveats(a, args.baseline):
            print(f"caveat: {line}")
    for f in result.failed:
        print(f"failed: {f}", file=sys.stderr)
    written = [report, csv_path] + ([out / "seeds.csv"] if a is not None else []) + plots
    print(_written(out, written), file=sys.stderr)
    return 1 if result.failed else 0


def cmd_tune_staleness(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *_on(args)]
    if args.target_accuracy is not None:
        overrides.append(f"train.target={{metric: accuracy, value: {args.target_accuracy}}}")
    _check_config_first("psgd tune staleness", args, overrides)
    from psgd.bench import convergence as bc
    from psgd.bench import tune
    from psgd.bench.run_checks import StartupError, check_modes
    with expected("psgd tune staleness", Fail((ConfigError, ValueError, StartupError), 2)):
        bounds = tune.parse_bounds(args.bounds)
        lr_grid = bc.parse_lr_grid(args.lr_grid) if args.lr_grid else None
        cfg = load_config(args.config, overrides)
        seeds = _seeds(args.seeds, cfg)
        if seeds < 1 or not 1 <= args.min_seeds <= seeds:
            raise ValueError("need 1 <= --min-seeds <= --seeds")
        target = bc.target_spec(cfg)
        if target is None:
            raise ValueError("give --target-accuracy, or set train.target (or train.target_accuracy) in the config")
        require_matplotlib()  # the bench report's plots: fail now, not after the runs
        specs = [bc.ModeSpec(f"ssp:{b}", Mode.SSP, b) for b in bounds]
        check_modes(args.config, overrides, [s.overrides for s in specs])  # model, data, every bound: before any run
    source = ("--target-accuracy" if args.target_accuracy is not None
              else "train.target" if cfg.train.target is not None else "train.target_accuracy")
    print(f"target: {target.text} ({source})", file=sys.stderr)
    out = _out(args, "tune", cfg)
    print(f"output directory: {out}", file=sys.stderr)
    with expected("psgd tune staleness", Fail((ConfigError, ValueError), 2)):
        # On the virtual cluster the tuner sets the spacing from its rate grid; elsewhere a pilot does.
        spacing = _spacing(args, overrides, specs, cfg, out) if cfg.cluster.launcher != "sim" else None
        if spacing is not None:
            print(spacing.text, file=sys.stderr)
            overrides = [*overrides, spacing.override]
        result = tune.run_tune(args.config, overrides, bounds, seeds, out, args.min_seeds, args.eta,
                               on_run=_progress, child_main=args.child_main, lr_grid=lr_grid)
    ran = load_config(args.config, [*overrides, *result.shared])  # with what the tuner fixed (eval spacing)
    setting = bc.setting_lines(ran, specs, per_mode_rates=bool(result.grid)) + ([spacing.text] if spacing else [])
    outputs = tune.write_tune_outputs(result, dump_config(ran), _command_line(args), setting)
    print(outputs.table)
    print(outputs.lines)
    for line in outputs.caveats:
        print(f"caveat: {line}")
    for f in result.bench.failed:
        print(f"failed: {f}", file=sys.stderr)
    print(_written(out, outputs.files), file=sys.stderr)
    return 0 if result.bound is not None else 1


def cmd_plot(args: argparse.Namespace) -> int:
    require_matplotlib()
    from psgd.bench.plots import plot_runs
    from psgd.bench.run_data import load_run
    with expected("psgd plot", Fail((FileNotFoundError, ValueError, KeyError), 2)):
        runs = [load_run(Path(d)) for d in args.run_dirs]
    target = args.target if args.target is not None else runs[0].summary.get("target_accuracy")
    for path in plot_runs(runs, Path(args.out), args.title, target):
        print(path)
    return 0


def _target(text: str) -> float:
    v = float(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def add_bench_convergence_command(bench) -> None:
    """`psgd bench convergence` under the `bench` subparsers."""
    conv = bench.add_parser("convergence", help="the same task under several consistency modes, rates and seeds")
    conv.add_argument("config")
    conv.add_argument("--modes", default="allreduce,bsp,ssp:2,ssp:4,asp",
                      help="comma-separated: allreduce, bsp, ssp:S, asp; suffixes +sa (staleness-aware), "
                           "+dc (DC-ASGD), +bN (bsp with N backup workers), e.g. asp+sa,bsp+b1")
    conv.add_argument("--on", choices=launcher_names(), default=None,
                      help="sim: every run on the virtual cluster, in simulated time (default: cluster.launcher)")
    conv.add_argument("--seeds", type=int, default=None,
                      help=f"runs per mode and rate, seeds run.seed, run.seed+1, ... (default {DEFAULT_SEEDS}, {SIM_SEEDS} on sim)")
    conv.add_argument("--lr-grid", default="", help="comma-separated learning rates: every mode runs at each and "
                                                   "is compared at its best")
    conv.add_argument("--lr-from", default="", help="a previous bench's summary.csv: each mode at the rate chosen there")
    conv.add_argument("--out", default=None, help="output directory (default: run.out_dir/bench-NAME-TIMESTAMP)")
    conv.add_argument("--title", default="", help="title of the report and plots")
    conv.add_argument("--baseline", default=Mode.BSP.value, help="the mode every other is compared with (a --modes label)")
    conv.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    conv.set_defaults(func=cmd_bench_convergence)


def add_convergence_commands(sub) -> None:
    """`psgd tune staleness` and `psgd plot`."""
    tune = sub.add_parser("tune", help="tuning").add_subparsers(dest="tune", required=True)
    stale = tune.add_parser("staleness", help="held time to target per SSP bound (successive halving over seeds), "
                                              "and the bound to use")
    stale.add_argument("config")
    stale.add_argument("--bounds", default="0,1,2,4,8", help="comma-separated SSP bounds")
    stale.add_argument("--target-accuracy", type=_target, default=None,
                       help="target test accuracy (default: the config's train.target or target_accuracy)")
    stale.add_argument("--on", choices=launcher_names(), default=None,
                       help="sim: every run on the virtual cluster, in simulated time (default: cluster.launcher)")
    stale.add_argument("--seeds", type=int, default=None,
                       help=f"seeds each finalist bound gets (default {DEFAULT_SEEDS}, {SIM_SEEDS} on sim)")
    stale.add_argument("--min-seeds", type=int, default=1, help="seeds every bound gets in the first rung")
    stale.add_argument("--eta", type=int, default=2, help="multiply the seeds by eta from one rung to the next")
    stale.add_argument("--lr-grid", default="", help="comma-separated rates each bound tries with one seed, keeping "
                                                     "its best (default on sim: the configured rate x 0.25, 0.5, 1, "
                                                     "2; elsewhere: the configured rate, no grid)")
    stale.add_argument("--out", default=None, help="output directory (default: run.out_dir/tune-NAME-TIMESTAMP)")
    stale.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    stale.set_defaults(func=cmd_tune_staleness)

    plot = sub.add_parser("plot", help="plots of existing run directories")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", default="plots", help="where the PNGs go (default: ./plots)")
    plot.add_argument("--title", default="")
    plot.add_argument("--target", type=_target, default=None, help="target accuracy line (default: the run's)")
    plot.set_defaults(func=cmd_plot)
