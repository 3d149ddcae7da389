"""`psgd ctl RUN_DIR set key=value ...` and `psgd ctl RUN_DIR show`: change or
inspect a live run's staleness bound, consistency mode (ssp/asp) or learning rate;
`psgd ctl RUN_DIR status`: a live run's clocks and whom its parked pulls wait on;
`psgd ctl RUN_DIR workers N`: scale an elastic run (cluster.workers: {min, max}) to N workers."""
from __future__ import annotations

import argparse
import json

from psgd.cli.failures import CommandFailed, Fail, expected


def cmd_ctl(args: argparse.Namespace) -> int:
    from psgd.orchestrate.control import ControlFailed, parse_assignments, set_live, show_live
    if args.action == "workers":
        return _workers(args)
    with expected("psgd ctl", Fail(ControlFailed, 1)):
        if args.action == "status":
            return _status(args)
        if args.action == "show":
            print(json.dumps(show_live(args.run_dir, args.timeout), indent=2))
            return 0
        changes = parse_assignments(args.assignments)
        result = set_live(args.run_dir, changes, args.timeout)
    what = ", ".join(f"{k}={v}" for k, v in changes.items())
    print(f"{what}: in force from clock {result.effective_clock} on all {len(result.shards)} shards")
    return 0


def _status(args: argparse.Namespace) -> int:
    from psgd.orchestrate.control import watch_live
    view = watch_live(args.run_dir, min(args.timeout, 1.0))
    if args.json:
        print(json.dumps(view.as_dict(), indent=2))
        return 0
    for w in view.workers:
        heard = "never heard" if w.last_heard_s is None else f"last heard {w.last_heard_s:.1f} s ago"
        wait = f", its pull for clock {w.parked_clock} parked {w.parked_s:.1f} s" if w.parked_clock is not None else ""
        print(f"worker {w.rank}: clock {w.clock}, {heard}{wait}")
    for s in view.shards:
        rate = "" if s.updates_per_s is None else f", {s.updates_per_s:.1f} updates/s"
        print(f"shard {s.shard}: {s.updates} updates{rate}, {s.parked} pulls parked")
    if view.waited_on:
        parked = sum(1 for w in view.workers if w.parked_clock is not None)
        print(f"waiting on: rank {', '.join(map(str, view.waited_on))} (clock {view.slowest_clock}): "
              f"{parked} worker(s)' pulls are parked behind it")
    else:
        print("waiting on: nobody (no pull is parked behind a slower worker)")
    return 0


def _workers(args: argparse.Namespace) -> int:
    from psgd.orchestrate.elastic import WorkersRequestFailed, request_workers
    if len(args.assignments) != 1 or not args.assignments[0].isdigit():
        raise CommandFailed(2, "psgd ctl: workers takes one count, e.g. psgd ctl RUN_DIR workers 4")
    count = int(args.assignments[0])
    with expected("psgd ctl", Fail(WorkersRequestFailed, 1)):
        span = request_workers(args.run_dir, count)
    print(f"asked for {count} workers (range {span.min}-{span.max}); the launcher starts or stops them now")
    return 0


def add_ctl_command(sub) -> None:
    ctl = sub.add_parser("ctl", help="change a live run at one clock on every shard (needs the run token)")
    ctl.add_argument("run_dir")
    ctl.add_argument("action", choices=("set", "show", "status", "workers"),
                     help="status: each worker's clock and waits, whom the parked pulls wait on (changes nothing)")
    ctl.add_argument("assignments", nargs="*", metavar="KEY=VALUE",
                     help="set: consistency.staleness=N|auto, consistency.mode=ssp|asp, optimizer.lr=X; "
                          "workers: N, the worker count of an elastic run (cluster.workers: {min, max})")
    ctl.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each shard (status: at most 1)")
    ctl.add_argument("--json", action="store_true", help="status: one JSON object on stdout")
    ctl.set_defaults(func=cmd_ctl)
