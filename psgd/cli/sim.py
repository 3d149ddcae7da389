"""`psgd sim calibrate RUN_DIR [--out CONFIG]`: the virtual cluster's time model from a real run."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_sim_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from psgd.config import ConfigError, dump_config, load_config
    from psgd.sim.calibrate import calibrate
    run_dir = Path(args.run_dir)
    try:
        found = calibrate(run_dir)
    except (ConfigError, ValueError) as exc:
        print(f"psgd sim calibrate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"sim": found.sim, "evidence": found.evidence}, indent=2))
    else:
        e = found.evidence
        print(f"# calibrated from {run_dir}: {e['workers']} workers, {e['shards']} shard(s), {e['worker_steps']} "
              f"steps; compute median {e['compute_ms_median']:.3f} ms (10th-90th percentile "
              f"{e['compute_ms_p10_p90'][0]:.3f}-{e['compute_ms_p10_p90'][1]:.3f}, sample CV {e['compute_sample_cv']:.3f}), "
              f"shard service {e['service_us_mean']:.1f} us, "
              f"quiet round trip {e['comm_ms_quiet']:.3f} ms (median {e['comm_ms_median']:.3f})")
        print(yaml.safe_dump({"sim": found.sim}, sort_keys=False).rstrip())
    if args.out:
        cfg = found.config(load_config(run_dir / "config.yaml"))
        Path(args.out).write_text(dump_config(cfg))
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
