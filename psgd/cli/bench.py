"""The measurement commands of the `psgd` CLI: benchmarks, staleness tuning, plots.

Kept apart from the run commands so each file stays short; like the rest of
psgd.cli, this is a place that prints.
"""
from __future__ import annotations

import argparse
import json
import sys

from psgd.cli.convergence import add_convergence_commands, add_study_command


def _bench_output(args: argparse.Namespace, result: dict, write_report, table: list[str]) -> int:
    if args.out:
        from pathlib import Path
        write_report(result, Path(args.out), "psgd " + " ".join(args.argv))
        print(f"report: {args.out}/report.md", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(table))
    return 0


def cmd_bench_comm(args: argparse.Namespace) -> int:
    from psgd.bench.comm import run_comm_bench
    from psgd.bench.procs import parse_list, parse_size
    from psgd.bench.report import write_comm_report
    sizes, shards = parse_list(args.sizes, parse_size), parse_list(args.shards)
    show = None if args.json else lambda r: print(
        f"{r['size_bytes']:>10} B  {r['shards']} shard(s): psgd {r['psgd_ms']:.3f} ms, raw zmq "
        f"{r['raw_zmq_ms']:.3f} ms, raw zmq + sgd {r['raw_zmq_sgd_ms']:.3f} ms, gloo {r['gloo_ms']:.3f} ms, "
        f"torch.rpc {r['torch_rpc_ms']:.3f} ms", file=sys.stderr)
    result = run_comm_bench(sizes, shards, args.repeats, on_row=show)
    table = [f"{'bytes':>10} {'shards':>6} {'psgd ms':>9} {'raw zmq':>9} {'raw+sgd':>9} {'gloo':>9} "
             f"{'torch.rpc':>9} {'psgd/raw':>8} {'psgd/floor':>10} {'rpc/psgd':>8}"]
    table += [f"{r['size_bytes']:>10} {r['shards']:>6} {r['psgd_ms']:>9.3f} {r['raw_zmq_ms']:>9.3f} "
              f"{r['raw_zmq_sgd_ms']:>9.3f} {r['gloo_ms']:>9.3f} {r['torch_rpc_ms']:>9.3f} "
              f"{r['psgd_over_raw_zmq']:>8.3f} {r['psgd_over_raw_zmq_sgd']:>10.3f} "
              f"{r['torch_rpc_over_psgd']:>8.3f}" for r in result["rows"]]
    return _bench_output(args, result, write_comm_report, table)


def cmd_bench_apply(args: argparse.Namespace) -> int:
    from psgd.bench.apply import run_apply_bench
    from psgd.bench.procs import parse_list, parse_size
    from psgd.bench.report import write_apply_report
    result = run_apply_bench(parse_list(args.sizes, parse_size), parse_list(args.optimizers, str), args.repeats)
    table = [f"{r['optimizer']:>8} {r['size_bytes']:>10} B  {r['median_ms']:8.3f} ms  {r['gb_per_s']:7.2f} GB/s"
             for r in result["rows"]]
    return _bench_output(args, result, write_apply_report, table)


def cmd_bench_scale(args: argparse.Namespace) -> int:
    from psgd.bench.procs import parse_list, parse_size
    from psgd.bench.report import write_scale_report
    from psgd.bench.scale import run_scale_bench
    show = None if args.json else lambda r: print(
        f"{r['shards']} shard(s) {r['workers']:>4} workers: {r['updates_per_s']:8.1f} updates/s, "
        f"pull {r['pull_latency_ms_median']} ms", file=sys.stderr)
    result = run_scale_bench(parse_list(args.shards), parse_list(args.workers), parse_size(args.grad_size),
                             args.compute_ms, window_s=args.window_s, processes=args.processes, on_row=show)
    table = [f"{s} shard(s): saturates at {v['saturates_at_workers']} workers, peak "
             f"{v['peak_updates_per_s']:.0f} updates/s" for s, v in result["saturation"].items()]
    return _bench_output(args, result, write_scale_report, table)


def add_measurement_commands(sub) -> None:
    """`psgd bench {convergence,study,comm,apply,scale}`, `psgd tune staleness` and `psgd plot`."""
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
    add_study_command(bench)
    add_convergence_commands(sub)
