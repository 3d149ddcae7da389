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
    from psgd.bench.fault_compare import check_same_storm, compare_storms
    from psgd.bench.fault_metrics import FaultTarget
    from psgd.bench.fault_report import analyse_faults, comparison_json, fault_json, fault_table, write_fault_report
    from psgd.bench.faults import Pairing, Where, plan_overrides, run_fault_bench
    target, on = FaultTarget(args.target), Where(args.on)
    with expected("psgd bench faults", Fail((ConfigError, ValueError), 2)):
        cfg = load_config(args.config, args.overrides)
        plan_overrides(cfg, target, args.kill_every_s, on)  # refuse a storm that cannot run before starting any
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        if args.against and on is not Where.SIM:
            raise ValueError("--against compares a simulated storm with a real one: give --on sim")
        real = _read_real(args.against) if args.against else None
        if real is not None:  # refused before any run
            check_same_storm({"target": str(target), "kill_every_s": args.kill_every_s,
                              "max_time_s": cfg.train.max_time_s, "mode": str(cfg.consistency.mode),
                              "workers": cfg.cluster.workers, "shards": cfg.cluster.num_servers}, real)
    out = Path(args.out) if args.out else Path(cfg.run.out_dir) / f"faults-{cfg.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / "runs").exists():
        print(f"psgd bench faults: {out} already holds a bench's runs: give a fresh --out", file=sys.stderr)
        return 2
    progress = (lambda msg: None) if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with expected("psgd bench faults", Fail((ConfigError, ValueError), 2)):
        bench = run_fault_bench(args.config, args.overrides, target, args.kill_every_s, args.seeds, out,
                                Pairing(args.pairing), progress, on)
        analysis = analyse_faults(bench, args.floor)
        against = None
        if real is not None:
            against = (args.against, compare_storms(fault_json(bench, analysis), real))
    report = write_fault_report(bench, analysis, "psgd " + shlex.join(args.argv), dump_config(cfg), against)
    if args.json:
        print(json.dumps({**fault_json(bench, analysis),
                          **({"comparison": comparison_json(*against)} if against else {})}, indent=1))
    else:
        print("\n".join(fault_table(bench, analysis)))
        for c in against[1] if against else []:
            print(f"{c.name}: simulated {c.text(c.simulated)}, real {c.text(c.real)}; simulated median inside the "
                  f"real interval: {'n/a' if c.inside is None else 'yes' if c.inside else 'no'}")
        print(f"report: {report}", file=sys.stderr)
    return 0 if analysis is not None else 1


def _read_real(path: str) -> dict:
    """A real bench's faults.json, or ValueError in one line."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--against {path}: not a readable faults.json ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("analysis"), dict):
        raise ValueError(f"--against {path}: no analysis in it (a faults.json of psgd bench faults)")
    if data.get("on", "local") != "local":
        raise ValueError(f"--against {path}: that bench ran on {data.get('on')}, not on real processes")
    return data


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
    p.add_argument("--on", choices=("local", "sim"), default="local",
                   help="real processes on this machine (default), or the virtual cluster with its failure model "
                        "(sim.faults): the same plan, simulated seconds")
    p.add_argument("--against", default=None, metavar="FAULTS_JSON",
                   help="with --on sim: a real bench's faults.json; the report sets the simulated figures beside "
                        "its and says whether each simulated median lies in the real interval")
    p.add_argument("--out", default=None, help="output directory (default: run.out_dir/faults-NAME-TIMESTAMP)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=cmd_bench_faults)
