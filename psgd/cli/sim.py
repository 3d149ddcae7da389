"""`psgd sim calibrate RUN_DIR [--out CONFIG]`: the virtual cluster's time model from a real run."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _out_problem(out: Path) -> str:
    """Why the calibrated config cannot be written to `out` ("" when it can)."""
    if out.is_dir():
        return f"--out {out} is a directory: name the config file to write"
    if not out.parent.is_dir():
        return f"--out {out}: the directory {out.parent} does not exist"
    return ""


def cmd_sim_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from psgd.config import ConfigError, dump_config, load_config
    from psgd.runtime.files import atomic_write
    from psgd.sim.calibrate import calibrate
    run_dir = Path(args.run_dir)
    problem = _out_problem(Path(args.out)) if args.out else ""
    if problem:
        print(f"psgd sim calibrate: {problem}", file=sys.stderr)
        return 2
    try:
        found = calibrate(run_dir)
    except (ConfigError, ValueError) as exc:  # ValueError: a damaged metrics.jsonl line
        print(f"psgd sim calibrate: {run_dir}: {' '.join(str(exc).split())}", file=sys.stderr)  # one line
        return 2
    for line in found.warnings:
        print(f"psgd sim calibrate: warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps({"sim": found.sim, "evidence": found.evidence, "warnings": found.warnings}, indent=2))
    else:
        e = found.evidence
        print(f"# calibrated from {run_dir}: {e['workers']} workers, {e['shards']} shard(s), {e['worker_steps']} "
              f"steps; a worker's own time per step {e['own_ms_mean']:.3f} ms (10th-90th percentile "
              f"{e['own_ms_p10_p90'][0]:.3f}-{e['own_ms_p10_p90'][1]:.3f}), shard service "
              f"{e['service_us_per_push']:.1f} us per push, round trip with no wait "
              f"{e['unwaited_comm_ms_mean']:.3f} ms (all: {e['comm_ms_mean']:.3f}); CPU load "
              f"{e['cpu_load']:.1f} on {e['cores']} cores")
        print(yaml.safe_dump({"sim": found.sim}, sort_keys=False).rstrip())
    if args.out:
        cfg = found.config(load_config(run_dir / "config.yaml"))
        try:
            atomic_write(Path(args.out), dump_config(cfg))
        except OSError as exc:
            print(f"psgd sim calibrate: cannot write --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if not args.json:
            print(f"# the run's config with this sim: section -> {args.out} "
                  f"(psgd launch {args.out} --on sim --set cluster.workers=64)")
    return 0


def add_sim_command(sub) -> None:
    sim = sub.add_parser("sim", help="the virtual cluster's tools").add_subparsers(dest="sim", required=True)
    cal = sim.add_parser("calibrate", help="the sim: section that reproduces a real run's compute (and its "
                         "spread), service and round-trip times")
    cal.add_argument("run_dir", help="a real run's directory")
    cal.add_argument("--out", help="also write the run's config with this sim: section here")
    cal.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cal.set_defaults(func=cmd_sim_calibrate)
