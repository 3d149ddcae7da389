"""`psgd bench faults`: argument parsing and printing around psgd.bench.faults (which
neither prints nor parses)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from psgd.cli.failures import Fail, expected
from psgd.config import ConfigError, dump_config, load_config

__all__ = ["add_bench_faults_command"]


def cmd_bench_faults(args: argparse.Namespace) -> int:
    from psgd.bench.fault_metrics import FaultTarget
    from psgd.bench.fault_report import analyse_faults, fault_json, fault_table, write_fault_report
    from psgd.bench.faults import Pairing, plan_overrides, run_fault_bench
    target = FaultTarget(args.target)
    with expected("psgd bench faults", Fail((ConfigError, ValueError), 2)):
        cfg = load_config(args.config, args.overrides)
        plan_overrides(cfg, target, args.kill_every_s)  # refuse a storm that cannot run before starting any
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    out = Path(args.out) if args.out else Path(cfg.run.out_dir) / f"faults-{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / "runs").exists():
        print(f"psgd bench faults: {out} already holds a bench's runs: give a fresh --out", file=sys.stderr)
        return 2
    progress = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with expected("psgd bench faults", Fail((ConfigError, ValueError), 2)):
        bench = run_fault_bench(args.config, args.overrides, target, args.kill_every_s, args.seeds, out,
                                Pairing(args.pairing), progress)
    analysis = analyse_faults(bench, args.floor)
    report = write_fault_report(bench, analysis, "psgd " + shlex.join(args.argv), dump_config(cfg))
    if args.json:
        print(json.dumps(fault_json(bench, analysis), indent=1))
    else:
        print("\n".join(fault_table(bench, analysis)))
        print(f"report: {report}", file=sys.stderr)
    return 0 if analysis is not None else 1


def add_bench_faults_command(bench) -> None:
    """`psgd bench faults` under the `bench` subparsers."""
    p = bench.add_parser("faults", help="goodput of the same job fault-free and with processes killed at a rate")
    p.add_argument("config")
    p.add_argument("--kill-every-s", type=float, default=10.0,
                   help="SIGKILL one process of the target every this many seconds of training (default 10)")
    p.add_argument("--target", choices=("workers", "shards"), default="workers",
                   help="which processes to kill, in turn (default workers)")
    p.add_argument("--seeds", type=int, default=3, help="seeds run.seed, run.seed+1, ...: each runs fault-free and "
                                                        "under the storm (default 3)")
    p.add_argument("--pairing", choices=("side-by-side", "alternate"), default="side-by-side",
                   help="a seed's two runs at once (default: the same machine load on both) or one after the other")
    p.add_argument("--floor", type=float, default=0.9,
                   help="the goodput the storm must keep, as a fraction of the fault-free run's (default 0.9)")
    p.add_argument("--out", default=None, help="output directory (default: run.out_dir/faults-NAME-TIMESTAMP)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_bench_faults)
