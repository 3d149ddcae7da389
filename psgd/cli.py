"""The `psgd` command line. The only place that prints or shows progress."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Optional

from psgd.config import ConfigError, load_config

# Single-role commands run the role's module by path: psgd never imports
# servers/ or workers/ at module level.
ROLE_COMMANDS = {
    "server": "servers.shard",
    "worker": "workers.worker",
    "eval": "workers.evaluator:evaluate_once",
}


def _run_module(spec: str, argv: list[str]) -> int:
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func or "main")(argv)


def _progress_bar(total: int):
    from tqdm import tqdm
    bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr, leave=True)

    def update(p) -> None:
        bar.n = min(p.steps, total)
        post = {"upd/s": f"{p.updates_per_s:.0f}"}
        if p.accuracy is not None:
            post["acc"] = f"{p.accuracy:.3f}"
        if p.staleness_mean is not None:
            post["stale"] = f"{p.staleness_mean:.2f}"
        bar.set_postfix(post, refresh=False)
        bar.refresh()
    return bar, update


def cmd_launch(args: argparse.Namespace) -> int:
    from psgd.launcher import Launcher, make_run_dir
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"psgd launch: config error: {exc}", file=sys.stderr)
        return 2
    run_dir = make_run_dir(cfg, args.out)
    print(f"run directory: {run_dir}", file=sys.stderr)
    bar, update = _progress_bar(cfg.cluster.workers * cfg.train.steps_per_worker) if not args.quiet else (None, None)
    try:
        result = Launcher(cfg, args.config, args.overrides, run_dir, on_progress=update).run()
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


def _bench_output(args: argparse.Namespace, result: dict, write_report, table: list[str]) -> int:
    if args.out:
        from pathlib import Path
        write_report(result, Path(args.out), "psgd " + " ".join(args.argv_used))
        print(f"report: {args.out}/report.md", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(table))
    return 0


def cmd_bench_comm(args: argparse.Namespace) -> int:
    from psgd.bench_comm import run_comm_bench
    from psgd.bench_procs import parse_list, parse_size
    from psgd.bench_report import write_comm_report
    sizes, shards = parse_list(args.sizes, parse_size), parse_list(args.shards)
    show = None if args.json else lambda r: print(
        f"{r['size_bytes']:>10} B  {r['shards']} shard(s): psgd {r['psgd_ms']:.3f} ms, raw zmq "
        f"{r['raw_zmq_ms']:.3f} ms, gloo {r['gloo_ms']:.3f} ms, torch.rpc {r['torch_rpc_ms']:.3f} ms", file=sys.stderr)
    result = run_comm_bench(sizes, shards, args.repeats, on_row=show)
    table = [f"{'bytes':>10} {'shards':>6} {'psgd ms':>9} {'raw zmq':>9} {'gloo':>9} {'torch.rpc':>9} "
             f"{'psgd/raw':>8} {'rpc/psgd':>8}"]
    table += [f"{r['size_bytes']:>10} {r['shards']:>6} {r['psgd_ms']:>9.3f} {r['raw_zmq_ms']:>9.3f} "
              f"{r['gloo_ms']:>9.3f} {r['torch_rpc_ms']:>9.3f} {r['psgd_over_raw_zmq']:>8.3f} "
              f"{r['torch_rpc_over_psgd']:>8.3f}" for r in result["rows"]]
    return _bench_output(args, result, write_comm_report, table)


def cmd_bench_apply(args: argparse.Namespace) -> int:
    from psgd.bench_apply import run_apply_bench
    from psgd.bench_procs import parse_list, parse_size
    from psgd.bench_report import write_apply_report
    result = run_apply_bench(parse_list(args.sizes, parse_size), parse_list(args.optimizers, str), args.repeats)
    table = [f"{r['optimizer']:>8} {r['size_bytes']:>10} B  {r['median_ms']:8.3f} ms  {r['gb_per_s']:7.2f} GB/s"
             for r in result["rows"]]
    return _bench_output(args, result, write_apply_report, table)


def cmd_bench_scale(args: argparse.Namespace) -> int:
    from psgd.bench_procs import parse_list, parse_size
    from psgd.bench_report import write_scale_report
    from psgd.bench_scale import run_scale_bench
    show = None if args.json else lambda r: print(
        f"{r['shards']} shard(s) {r['workers']:>4} workers: {r['updates_per_s']:8.1f} updates/s, "
        f"pull {r['pull_latency_ms_median']} ms", file=sys.stderr)
    result = run_scale_bench(parse_list(args.shards), parse_list(args.workers), parse_size(args.grad_size),
                             args.compute_ms, window_s=args.window_s, processes=args.processes, on_row=show)
    table = [f"{s} shard(s): saturates at {v['saturates_at_workers']} workers, peak "
             f"{v['peak_updates_per_s']:.0f} updates/s" for s, v in result["saturation"].items()]
    return _bench_output(args, result, write_scale_report, table)


def _add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="reproducible measurements").add_subparsers(dest="bench", required=True)
    comm = bench.add_parser("comm", help="push+pull vs raw ZeroMQ, gloo all-reduce and a torch.rpc PS")
    comm.add_argument("--sizes", default="1MB,10MB,40MB", help="payload sizes (KB/MB/GB)")
    comm.add_argument("--shards", default="1,2", help="shard counts for psgd")
    comm.add_argument("--repeats", type=int, default=30, help="timed round trips per method and size")
    comm.set_defaults(func=cmd_bench_comm)
    apply = bench.add_parser("apply", help="gradient bytes a shard applies per second")
    apply.add_argument("--sizes", default="1MB,10MB,40MB")
    apply.add_argument("--optimizers", default="sgd,adam")
    apply.add_argument("--repeats", type=int, default=30)
    apply.set_defaults(func=cmd_bench_apply)
    scale = bench.add_parser("scale", help="many light workers against a few shards")
    scale.add_argument("--shards", default="1,2,4")
    scale.add_argument("--workers", default="1,4,16,32,64,128,256")
    scale.add_argument("--grad-size", default="64KB", help="gradient per worker step (split over the shards)")
    scale.add_argument("--compute-ms", type=float, default=20.0, help="simulated compute per step")
    scale.add_argument("--window-s", type=float, default=3.0, help="measured seconds per point")
    scale.add_argument("--processes", type=int, default=4, help="processes hosting the light workers")
    scale.set_defaults(func=cmd_bench_scale)
    for p in (comm, apply, scale):
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--out", default=None, help="write results.json, report.md and plots here")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="psgd", description="Parameter-server SGD: BSP, SSP and ASP over ZeroMQ.")
    sub = p.add_subparsers(dest="command", required=True)

    launch = sub.add_parser("launch", help="run servers, workers and the evaluator on this machine")
    launch.add_argument("config")
    launch.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, value parsed as YAML (repeatable)")
    launch.add_argument("--out", default=None, help="run directory (default: run.out_dir/NAME-TIMESTAMP)")
    launch.add_argument("--quiet", action="store_true", help="no progress bar")
    launch.set_defaults(func=cmd_launch)

    for name, help_text in (("server", "run one server shard (multi-host runs)"),
                            ("worker", "run one worker (multi-host runs)"),
                            ("eval", "evaluate the parameters held by running servers")):
        r = sub.add_parser(name, help=help_text, add_help=False)
        r.add_argument("rest", nargs=argparse.REMAINDER)
        r.set_defaults(func=lambda a, n=name: _run_module(ROLE_COMMANDS[n], a.rest))
    _add_bench(sub)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv_used = argv
    try:
        return args.func(args)
    except ValueError as exc:  # bad bench arguments (sizes, lists)
        if getattr(args, "command", None) != "bench":
            raise
        print(f"psgd bench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
