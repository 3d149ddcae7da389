"""The `psgd` command line. The only place that parses arguments, prints or shows progress."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from psgd.cli.bench import add_measurement_commands
from psgd.cli.ctl import add_ctl_command
from psgd.cli.doctor import add_doctor_command
from psgd.cli.explain import add_explain_commands
from psgd.cli.failures import CommandFailed, Fail, expected
from psgd.cli.launch_text import launch_result_lines, seconds
from psgd.cli.replay import add_replay_command
from psgd.cli.sim import add_sim_command
from psgd.config import ConfigError, load_config
from psgd.orchestrate.launchers import launcher_names
from psgd.orchestrate.roles import ROLES, run_role
from psgd.runtime.role import RoleFailed
from psgd.runtime.user_errors import STARTUP_EXIT_CODE, StartupError
from psgd.runtime.version import VERSION


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


def _with_notices(update, bar):
    """The progress callback, printing each new notice (a lost node) once, even with --quiet."""
    shown = 0

    def on_progress(p) -> None:
        nonlocal shown
        for line in p.notices[shown:]:
            (bar.write if bar is not None else print)(f"psgd launch: {line}", file=sys.stderr)
        shown = len(p.notices)
        if update is not None:
            update(p)
    return on_progress


def cmd_launch(args: argparse.Namespace) -> int:
    from psgd.orchestrate.job import resume_config
    from psgd.orchestrate.launchers import LaunchFailed
    if args.resume:
        if args.config is not None or args.overrides or args.out or args.on or args.address:
            print("psgd launch: --resume RUN_DIR takes no CONFIG, --set, --out, --on or --address: "
                  "the run continues with its own config", file=sys.stderr)
            return 2
        with expected("psgd launch", Fail((LaunchFailed, ConfigError), 2, "cannot resume: {}")):
            cfg = resume_config(Path(args.resume))
    elif args.config is None:
        print("psgd launch: give a CONFIG file, or --resume RUN_DIR", file=sys.stderr)
        return 2
    else:
        # Recorded in the run's config.yaml, so --resume continues where the run ran.
        overrides = [*args.overrides, *([f"cluster.launcher={args.on}"] if args.on else []),
                     *([f"ray.address={args.address}"] if args.address else [])]
        with expected("psgd launch", Fail(ConfigError, 2, "config error: {}")):
            cfg = load_config(args.config, overrides)
    from psgd.orchestrate.job import RunDirUnusable, prepare_job
    from psgd.orchestrate.launchers import LauncherUnavailable
    with expected("psgd launch", Fail(ConfigError, 2, "config error: {}"), Fail(LauncherUnavailable, 2),
                  Fail(StartupError, STARTUP_EXIT_CODE),  # the user's model or data, checked before any spawn
                  Fail(RunDirUnusable, 1, "{}; nothing was started")):
        job = prepare_job(cfg, out=args.out, resume=Path(args.resume) if args.resume else None)
    run_dir = job.run_dir
    print(f"run directory: {run_dir}{' (resuming)' if args.resume else ''}", file=sys.stderr)
    bar, update = _progress_bar(cfg.cluster.workers * cfg.train.steps_per_worker) if not args.quiet else (None, None)
    try:
        result = job.run(on_progress=_with_notices(update, bar), child_main=args.child_main)
    finally:
        if bar is not None:
            bar.close()
    for line in launch_result_lines(result, run_dir):
        print(line, file=sys.stdout if result.code == 0 else sys.stderr)
    return result.code


def cmd_run(args: argparse.Namespace) -> int:
    with expected("psgd run", Fail(ConfigError, 2)):
        load_config(args.config, args.overrides)  # a bad config fails before the job's imports (torch: seconds)
    from psgd.orchestrate.cluster.run import run_job
    with expected("psgd run", Fail(ValueError, 2),  # ConfigError, ClusterEnvError
                  Fail(RoleFailed),                  # e.g. the run directory is a launcher's
                  Fail(RuntimeError, 1)):            # the launcher's TCPStore could not be reached
        return run_job(args.config, args.overrides, args.run_dir)


def cmd_role(args: argparse.Namespace) -> int:
    """`psgd server|worker|evaluator|allreduce CONFIG --FLAG I`: one role in this process."""
    # A bad config or user code fails the same every time: the launcher does not restart these.
    with expected(f"psgd {args.command}", Fail((ConfigError, StartupError), STARTUP_EXIT_CODE), Fail(RoleFailed)):
        cfg = load_config(args.config, args.overrides)
        return run_role(args.command, args.index, cfg, args.run_dir, supervised=args.supervised)


def cmd_eval(args: argparse.Namespace) -> int:
    from psgd.workers.evaluator import evaluate_servers
    with expected("psgd eval", Fail(ConfigError, 2), Fail(RoleFailed, 1)):
        cfg = load_config(args.config, args.overrides)
        result = evaluate_servers(cfg, save=args.save)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"accuracy {result['accuracy']:.4f}  test_loss {result['test_loss']:.4f}  updates {result['updates']}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from psgd.orchestrate.records.collect import collect
    run_dir = Path(args.run_dir)
    with expected("psgd collect", Fail((ValueError, OSError), 2)):
        if args.config is None and not (run_dir / "config.yaml").is_file():
            raise ValueError(f"{run_dir} has no config.yaml (a hand-started role leaves one there): "
                             "pass the run's config with --config CONFIG")
        s = collect(run_dir, load_config(args.config) if args.config else None)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    acc = s.get("final_test_accuracy")
    missing = s.get("missing_events") or []
    print(f"collected {run_dir}: {s.get('mode')} accuracy {'—' if acc is None else f'{acc:.4f}'}, "
          f"{s.get('total_updates')} updates, {s.get('worker_steps')} worker steps in {seconds(s.get('wall_time_s'))}, "
          f"time to target {seconds(s.get('time_to_target_s'), 'not reached')}; "
          + (f"no events from {', '.join(missing)}" if missing else "every process's events found")
          + " -> metrics.jsonl, summary.json")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from psgd.wire.transport import KeyFileExists, generate_keys
    if args.clients < 1:
        print("psgd keys generate: --clients must be >= 1", file=sys.stderr)
        return 2
    try:
        written = generate_keys(args.dir, clients=args.clients, force=args.force)
    except KeyFileExists as exc:
        raise CommandFailed(2, f"psgd keys generate: {exc}") from None
    except OSError as exc:
        raise CommandFailed(1, f"psgd keys generate: cannot write {exc.filename or args.dir}: {exc.strerror}") from None
    for path in written:
        print(path)
    print(f"server key pair and {args.clients} authorised client key pair(s) in {args.dir}; "
          "give clients server.key and their own client*.key_secret, keep server.key_secret private",
          file=sys.stderr)
    return 0


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, value parsed as YAML (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="psgd", description="Parameter-server SGD: BSP, SSP and ASP over ZeroMQ.")
    p.add_argument("--version", action="version", version=f"psgd {VERSION}",
                   help="print the version of psgd (the one summary.json records) and exit")
    sub = p.add_subparsers(dest="command", required=True)

    launch = sub.add_parser("launch", help="run servers, workers and the evaluator on this machine")
    launch.add_argument("config", nargs="?", default=None)
    launch.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, value parsed as YAML (repeatable)")
    launch.add_argument("--out", default=None, help="run directory (default: run.out_dir/NAME-TIMESTAMP)")
    launch.add_argument("--quiet", action="store_true", help="no progress bar")
    launch.add_argument("--on", choices=launcher_names(), default=None,
                        help="where the processes run (psgd/orchestrate/launchers/); sim: the virtual cluster, "
                        "in simulated time "
                        "(default: the config's cluster.launcher, local)")
    launch.add_argument("--address", default=None,
                        help="with --on ray: the Ray cluster to join, e.g. auto (default: ray.address)")
    launch.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="continue a stopped run from its checkpoints, with its own config")
    launch.set_defaults(func=cmd_launch)

    keys = sub.add_parser("keys", help="CurveZMQ keys for security.curve")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    gen = keys_sub.add_parser("generate", help="make a server key pair and authorised client key pairs in DIR")
    gen.add_argument("dir")
    gen.add_argument("--clients", type=int, default=1, help="client key pairs to make and authorise")
    gen.add_argument("--force", action="store_true", help="replace keys already in DIR (clients holding the "
                     "old keys are locked out)")
    gen.set_defaults(func=cmd_keys)
    add_measurement_commands(sub)
    add_ctl_command(sub)
    add_doctor_command(sub)
    add_replay_command(sub)
    add_sim_command(sub)
    add_explain_commands(sub)

    for spec in ROLES.values():
        r = sub.add_parser(spec.name, help=spec.help)
        r.add_argument("config")
        r.add_argument(spec.index_flag, dest="index", type=int, default=0)
        _add_set(r)
        r.add_argument("--run-dir", default=None, help="where events and outputs go")
        r.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
        r.set_defaults(func=cmd_role)

    ev = sub.add_parser("eval", help="evaluate the parameters held by running servers")
    ev.add_argument("config")
    _add_set(ev)
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    ev.add_argument("--save", type=Path, default=None, help="write the parameters as a state_dict")
    ev.set_defaults(func=cmd_eval)

    run = sub.add_parser("run", help="one process of a job started by srun or torchrun (role from the environment)")
    run.add_argument("config")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, value parsed as YAML (repeatable)")
    run.add_argument("--run-dir", default=None, help="run directory (default: run.out_dir/NAME-JOBID)")
    run.set_defaults(func=cmd_run)

    collect = sub.add_parser("collect", help="merge a multi-host run's events into metrics.jsonl and summary.json")
    collect.add_argument("run_dir")
    collect.add_argument("--config", default=None, help="the run's config (default: RUN_DIR/config.yaml)")
    collect.add_argument("--json", action="store_true", help="print summary.json instead of one line")
    collect.set_defaults(func=cmd_collect)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded in reports, so a study can be re-run
    args.child_main = main  # the `psgd` entry forked children run (passed down: no import back into cli)
    from psgd.bench.pyplot import MissingExtra
    try:
        return args.func(args)
    except CommandFailed as exc:  # an error the command expects: its one line, no traceback
        print(exc.line, file=sys.stderr)
        return exc.code
    except MissingExtra as exc:  # one line naming the extra to install, no traceback
        sub = getattr(args, "bench", None) or getattr(args, "tune", None)
        print(f"psgd {args.command}{' ' + sub if sub else ''}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # bad bench arguments (sizes, lists)
        if getattr(args, "command", None) != "bench":
            raise
        print(f"psgd bench: {exc}", file=sys.stderr)
        return 2

