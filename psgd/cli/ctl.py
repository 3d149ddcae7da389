"""`psgd ctl RUN_DIR set key=value ...` and `psgd ctl RUN_DIR show`: change or
inspect a live run's staleness bound, consistency mode (ssp/asp) or learning rate."""
from __future__ import annotations

import argparse
import json

from psgd.cli.failures import Fail, expected


def cmd_ctl(args: argparse.Namespace) -> int:
    from psgd.orchestrate.control import ControlFailed, parse_assignments, set_live, show_live
    with expected("psgd ctl", Fail(ControlFailed, 1)):
        if args.action == "show":
            print(json.dumps(show_live(args.run_dir, args.timeout), indent=2))
            return 0
        changes = parse_assignments(args.assignments)
        result = set_live(args.run_dir, changes, args.timeout)
    what = ", ".join(f"{k}={v}" for k, v in changes.items())
    print(f"{what}: in force from clock {result.effective_clock} on all {len(result.shards)} shards")
    return 0


def add_ctl_command(sub) -> None:
    ctl = sub.add_parser("ctl", help="change a live run at one clock on every shard (needs the run token)")
    ctl.add_argument("run_dir")
    ctl.add_argument("action", choices=("set", "show"))
    ctl.add_argument("assignments", nargs="*", metavar="KEY=VALUE",
                     help="consistency.staleness=N|auto, consistency.mode=ssp|asp, optimizer.lr=X")
    ctl.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each shard")
    ctl.set_defaults(func=cmd_ctl)
