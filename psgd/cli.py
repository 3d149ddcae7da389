"""The `psgd` command line. The only place that prints or shows progress."""
from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from psgd.config import ConfigError, load_config

# Single-role commands run the role's module by path: psgd never imports
# servers/ or workers/ at module level.
ROLE_COMMANDS = {
    "server": "servers.shard",
    "worker": "workers.worker",
    "eval": "workers.evaluator:evaluate_once",
    "evaluator": "workers.evaluator",
}


def _run_module(spec: str, argv: list[str]) -> int:
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func or "main")(argv)


def _progress_bar(total: int):
    from tqdm import tqdm
    bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr, desc="starting")
    started = False

    def update(p) -> None:
        nonlocal started
        if p.started and not started:
            started = True
            bar.reset(total=total)  # the bar's clock starts with training, not with spawning
            bar.set_description("training")
        post = {"upd/s": f"{p.updates_per_s:.0f}"}
        if p.accuracy is not None:
            post["acc"] = f"{p.accuracy:.3f}"
        if p.staleness_mean is not None:
            post["stale"] = f"{p.staleness_mean:.2f}/{p.staleness_max}"  # mean/max over every shard
        bar.set_postfix(post, refresh=False)
        if p.steps > bar.n:
            bar.update(min(p.steps, total) - bar.n)  # redraws at most every tqdm mininterval
    return bar, update


def cmd_launch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from psgd.launcher import LaunchFailed, Launcher, make_run_dir, read_launch_file
    config, overrides = args.config, args.overrides
    if args.resume:
        if config is not None or overrides or args.out:
            print("psgd launch: --resume RUN_DIR takes no CONFIG, --set or --out: "
                  "the run continues with its own config", file=sys.stderr)
            return 2
        try:
            config, overrides = read_launch_file(Path(args.resume))
        except LaunchFailed as exc:
            print(f"psgd launch: cannot resume: {exc}", file=sys.stderr)
            return 2
    elif config is None:
        print("psgd launch: give a CONFIG file, or --resume RUN_DIR", file=sys.stderr)
        return 2
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        print(f"psgd launch: config error: {exc}", file=sys.stderr)
        return 2
    run_dir = Path(args.resume) if args.resume else make_run_dir(cfg, args.out)
    print(f"run directory: {run_dir}{' (resuming)' if args.resume else ''}", file=sys.stderr)
    bar, update = _progress_bar(cfg.cluster.workers * cfg.train.steps_per_worker) if not args.quiet else (None, None)
    try:
        result = Launcher(cfg, config, overrides, run_dir, on_progress=update, resume=bool(args.resume)).run()
    finally:
        if bar is not None:
            bar.close()
    s = result.summary or {}
    if result.code == 0:
        acc = s.get("final_test_accuracy")
        ttt = s.get("time_to_target_s")
        print(f"done: {s.get('mode')} accuracy {acc if acc is None else round(acc, 4)} "
              f"in {s.get('wall_time_s')}s, {s.get('total_updates')} updates, "
              f"time to target {ttt if ttt is not None else 'not reached'}, "
              f"staleness mean {s.get('staleness_mean')} max {s.get('staleness_max')}, "
              f"max clock gap {s.get('max_clock_gap')} -> {run_dir}")
    else:
        print(f"psgd launch: failed: {result.reason} (logs in {run_dir / 'logs'})", file=sys.stderr)
    return result.code


def cmd_run(args: argparse.Namespace) -> int:
    from psgd.run import run_job
    try:
        return run_job(args.config, args.overrides, args.run_dir)
    except ValueError as exc:  # ConfigError, ClusterEnvError
        print(f"psgd run: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # the launcher's TCPStore could not be reached
        print(f"psgd run: {exc}", file=sys.stderr)
        return 1


def cmd_collect(args: argparse.Namespace) -> int:
    from pathlib import Path
    from psgd.collect import collect
    try:
        s = collect(Path(args.run_dir))
    except (ValueError, OSError) as exc:
        print(f"psgd collect: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(s, indent=2))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from psgd.transport import generate_keys
    if args.clients < 1:
        print("psgd keys generate: --clients must be >= 1", file=sys.stderr)
        return 2
    written = generate_keys(args.dir, clients=args.clients)
    for path in written:
        print(path)
    print(f"server key pair and {args.clients} authorised client key pair(s) in {args.dir}; "
          "give clients server.key and their own client*.key_secret, keep server.key_secret private",
          file=sys.stderr)
    return 0


def _bench_out(args, kind: str, cfg) -> Path:
    if args.out:
        return Path(args.out)
    return Path(cfg.run.out_dir) / f"{kind}-{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _command_line(args) -> str:
    return "psgd " + shlex.join(args.argv)


def _print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_bench_convergence(args: argparse.Namespace) -> int:
    from psgd import bench_convergence as bc
    from psgd.config import dump_config
    try:
        specs = bc.parse_modes(args.modes)
        if args.seeds < 1:
            raise ValueError("--seeds must be >= 1")
        cfg = load_config(args.config, args.overrides)
    except (ConfigError, ValueError) as exc:
        print(f"psgd bench convergence: {exc}", file=sys.stderr)
        return 2
    out = _bench_out(args, "bench", cfg)
    print(f"output directory: {out}", file=sys.stderr)
    try:
        result = bc.run_matrix(args.config, args.overrides, specs, args.seeds, out, on_run=_print_progress)
    except ConfigError as exc:
        print(f"psgd bench convergence: config error: {exc}", file=sys.stderr)
        return 2
    title = args.title or f"{cfg.task.model} on {cfg.task.dataset}, {cfg.cluster.workers} workers"
    report, csv_path, plots = bc.write_outputs(result, title, dump_config(cfg), _command_line(args))
    print(bc.mode_table(result.runs, result.target))
    for f in result.failed:
        print(f"failed: {f}", file=sys.stderr)
    print(f"wrote {report}, {csv_path} and {len(plots)} plots", file=sys.stderr)
    return 1 if result.failed else 0


def cmd_tune_staleness(args: argparse.Namespace) -> int:
    from psgd import bench_convergence as bc
    from psgd import tune
    from psgd.config import dump_config
    overrides = list(args.overrides) + [f"train.target_accuracy={args.target_accuracy}"]
    try:
        bounds = tune.parse_bounds(args.bounds)
        if args.seeds < 1:
            raise ValueError("--seeds must be >= 1")
        cfg = load_config(args.config, overrides)
    except (ConfigError, ValueError) as exc:
        print(f"psgd tune staleness: {exc}", file=sys.stderr)
        return 2
    out = _bench_out(args, "tune", cfg)
    print(f"output directory: {out}", file=sys.stderr)
    try:
        result = bc.run_matrix(args.config, overrides, tune.bound_specs(bounds), args.seeds, out,
                               on_run=_print_progress)
    except ConfigError as exc:
        print(f"psgd tune staleness: config error: {exc}", file=sys.stderr)
        return 2
    table, bound, line, md = tune.write_tune_outputs(result, bounds, args.target_accuracy, dump_config(cfg),
                                                     _command_line(args))
    print(table)
    print(line)
    for f in result.failed:
        print(f"failed: {f}", file=sys.stderr)
    print(f"wrote {md}", file=sys.stderr)
    return 0 if bound is not None else 1


def cmd_plot(args: argparse.Namespace) -> int:
    from psgd.plots import plot_runs
    from psgd.run_data import load_run
    try:
        runs = [load_run(Path(d)) for d in args.run_dirs]
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"psgd plot: {exc}", file=sys.stderr)
        return 2
    target = args.target if args.target is not None else runs[0].summary.get("target_accuracy")
    for path in plot_runs(runs, Path(args.out), args.title, target):
        print(path)
    return 0


def _target(text: str) -> float:
    v = float(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="psgd", description="Parameter-server SGD: BSP, SSP and ASP over ZeroMQ.")
    sub = p.add_subparsers(dest="command", required=True)

    launch = sub.add_parser("launch", help="run servers, workers and the evaluator on this machine")
    launch.add_argument("config", nargs="?", default=None)
    launch.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, value parsed as YAML (repeatable)")
    launch.add_argument("--out", default=None, help="run directory (default: run.out_dir/NAME-TIMESTAMP)")
    launch.add_argument("--quiet", action="store_true", help="no progress bar")
    launch.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue a stopped run from its checkpoints, with its own config")
    launch.set_defaults(func=cmd_launch)

    keys = sub.add_parser("keys", help="CurveZMQ keys for security.curve")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    gen = keys_sub.add_parser("generate", help="make a server key pair and authorised client key pairs in DIR")
    gen.add_argument("dir")
    gen.add_argument("--clients", type=int, default=1, help="client key pairs to make and authorise")
    gen.set_defaults(func=cmd_keys)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench", required=True)
    conv = bench.add_parser("convergence", help="the same task under several consistency modes and seeds")
    conv.add_argument("config")
    conv.add_argument("--modes", default="allreduce,bsp,ssp:2,ssp:4,asp",
                      help="comma-separated: allreduce, bsp, ssp:S, asp; '+sa' = staleness-aware (e.g. asp+sa)")
    conv.add_argument("--seeds", type=int, default=1, help="runs per mode, seeds run.seed, run.seed+1, ...")
    conv.add_argument("--out", default=None, help="output directory (default: run.out_dir/bench-NAME-TIMESTAMP)")
    conv.add_argument("--title", default="", help="title of the report and plots")
    conv.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    conv.set_defaults(func=cmd_bench_convergence)

    tune = sub.add_parser("tune", help="tuning").add_subparsers(dest="tune", required=True)
    stale = tune.add_parser("staleness", help="time to target accuracy per SSP bound, and the bound to use")
    stale.add_argument("config")
    stale.add_argument("--bounds", default="0,1,2,4,8", help="comma-separated SSP bounds")
    stale.add_argument("--target-accuracy", type=_target, required=True)
    stale.add_argument("--seeds", type=int, default=1)
    stale.add_argument("--out", default=None, help="output directory (default: run.out_dir/tune-NAME-TIMESTAMP)")
    stale.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    stale.set_defaults(func=cmd_tune_staleness)

    plot = sub.add_parser("plot", help="plots of existing run directories")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", default="plots", help="where the PNGs go (default: ./plots)")
    plot.add_argument("--title", default="")
    plot.add_argument("--target", type=_target, default=None, help="target accuracy line (default: the run's)")
    plot.set_defaults(func=cmd_plot)

    for name, help_text in (("server", "run one server shard (multi-host runs)"),
                            ("worker", "run one worker (multi-host runs)"),
                            ("evaluator", "run the periodic evaluator (multi-host runs)"),
                            ("eval", "evaluate the parameters held by running servers")):
        r = sub.add_parser(name, help=help_text, add_help=False)
        r.add_argument("rest", nargs=argparse.REMAINDER)
        r.set_defaults(func=lambda a, n=name: _run_module(ROLE_COMMANDS[n], a.rest))

    run = sub.add_parser("run", help="one process of a job started by srun or torchrun (role from the environment)")
    run.add_argument("config")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, value parsed as YAML (repeatable)")
    run.add_argument("--run-dir", default=None, help="run directory (default: run.out_dir/NAME-JOBID)")
    run.set_defaults(func=cmd_run)

    collect = sub.add_parser("collect", help="merge a multi-host run's events into metrics.jsonl and summary.json")
    collect.add_argument("run_dir")
    collect.set_defaults(func=cmd_collect)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded in reports, so a study can be re-run
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
