"""`psgd explain RUN_DIR [--json] [--what-if KEY=VALUE ...]` and `psgd trace RUN_DIR [-o FILE]`."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from psgd.cli.failures import Fail, expected


def _breakdown_lines(b) -> list[str]:
    from psgd.bench.explain_words import findings
    clock = "simulated" if b.clock == "simulated" else "wall"
    lines = [f"{b.run_dir}: {b.mode.value}, {len(b.workers)} workers, {len(b.shards)} shard(s), {clock} clock"
             + (f", {b.wall_time_s:.2f} s" if b.wall_time_s else "")
             + (f", time to target {b.time_to_target_s:.2f} s" if b.time_to_target_s else ""),
             f"{'worker':>6} {'steps':>6} {'span s':>8} {'compute':>8} {'wait':>6} {'round trip':>10} "
             f"{'(codec)':>8} {'other':>6}"]
    for w in b.workers:
        lines.append(f"{w.rank:>6} {w.steps:>6} {w.span_s:>8.2f} {w.share(w.compute_s):>8.0%} {w.share(w.wait_s):>6.0%} "
                     f"{w.share(w.transfer_s):>10.0%} {w.share(w.codec_s):>8.0%} {w.share(w.other_s):>6.0%}")
    for s in b.shards:
        busy = "not recorded" if s.busy_share is None else f"{s.busy_share:.0%}"
        lines.append(f"shard {s.shard}: busy {busy}, {s.pulls_deferred} pulls parked")
    lines += [f"- {f.text} [{f.source}]" for f in findings(b)]
    return lines


def _what_if_lines(r) -> list[str]:
    rep = r.reproduction
    lines = [f"calibrated on the run: sim {json.dumps(r.calibrated)}"]
    lines += [f"calibration warning: {w}" for w in r.warnings]
    misses = rep.misses()
    real, sim = rep.real, rep.simulated
    check = (f"the calibrated simulation reproduces the run within ±{rep.margin:.0%}" if not misses else
             f"the calibrated simulation does NOT reproduce the run within ±{rep.margin:.0%}: " + "; ".join(misses)
             + " (the changes below rest on it)")
    lines.append(f"{check}: updates/s real {real.updates_per_s:.1f}, simulated {sim.updates_per_s:.1f}; "
                 f"time to target real {_s(real.time_to_target_s)}, simulated {_s(sim.time_to_target_s)}")
    b = r.baseline
    lines.append(f"baseline (simulated, seeds {', '.join(map(str, b.seeds))}): time to target "
                 f"{_times(b.times_s)}, {b.median_updates_per_s:.1f} updates/s")
    for c in r.changes:
        lines.append(f"{c.change} (simulated): time to target {_times(c.times_s)}, {c.median_updates_per_s:.1f} "
                     f"updates/s; against the baseline: {c.judgement.text()}")
    return lines


def _s(x) -> str:
    return "not reached" if x is None else f"{x:.2f} s"


def _times(times) -> str:
    return "[" + ", ".join("-" if t is None else f"{t:.2f}" for t in times) + "] s"


def cmd_explain(args: argparse.Namespace) -> int:
    from psgd.bench.explain import breakdown
    from psgd.config import ConfigError
    with expected("psgd explain", Fail((ConfigError, ValueError), 2)):
        b = breakdown(Path(args.run_dir))
    out: dict = {"breakdown": b.as_dict()}
    if args.json:
        from psgd.bench.explain_words import findings
        out["findings"] = [{"text": f.text, "source": f.source} for f in findings(b)]
    else:
        print("\n".join(_breakdown_lines(b)))
    if not args.no_plot:
        out["timeline"] = _timeline(b, args)
    if args.what_if:
        out["what_if"] = _what_if(args)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


def _timeline(b, args) -> str | None:
    from psgd.bench.pyplot import MissingExtra
    from psgd.bench.timeline_plot import TIMELINE_PLOT, plot_timeline
    from psgd.bench.trace import trace
    path = Path(args.plot) if args.plot else Path(args.run_dir) / TIMELINE_PLOT
    try:
        plot_timeline(trace(Path(args.run_dir)), path, f"{b.mode.value}, {len(b.workers)} workers")
    except MissingExtra as exc:
        print(f"psgd explain: no timeline: {exc}", file=sys.stderr)
        return None
    except OSError as exc:
        print(f"psgd explain: cannot write the timeline {path}: {exc.strerror or exc}", file=sys.stderr)
        return None
    if not args.json:
        print(f"timeline: {path}")
    return str(path)


def _what_if(args: argparse.Namespace) -> dict:
    from psgd.bench.what_if import SEEDS, what_if
    from psgd.config import ConfigError
    from psgd.orchestrate.api import LaunchError
    with tempfile.TemporaryDirectory(prefix="psgd-what-if-") as tmp:
        out = Path(args.sim_out) if args.sim_out else Path(tmp)
        with expected("psgd explain", Fail((ConfigError, ValueError), 2, "--what-if: {}"),
                      Fail(LaunchError, 1, "--what-if: a simulation failed: {}")):
            report = what_if(Path(args.run_dir), args.what_if, out, seeds=args.seeds or SEEDS,
                             on_run=lambda what: print(f"psgd explain: simulating {what}", file=sys.stderr))
    if not args.json:
        print("\n".join(_what_if_lines(report)))
    return report.as_dict()


def cmd_trace(args: argparse.Namespace) -> int:
    import math

    from psgd.bench.trace import MAX_STEPS, TraceBounds, trace
    from psgd.config import ConfigError
    with expected("psgd trace", Fail((ConfigError, ValueError), 2)):
        doc = trace(Path(args.run_dir), TraceBounds(args.since, args.until if args.until is not None else math.inf,
                                                     args.max_steps or MAX_STEPS))
    out = Path(args.output) if args.output else Path(args.run_dir) / "trace.json"
    with expected("psgd trace", Fail(OSError, 1, f"cannot write {out}: {{}}")):
        out.write_text(json.dumps(doc))
    print(f"{out}: {len(doc['traceEvents'])} trace events ({doc['otherData']['steps']}; window "
          f"{doc['otherData']['window']}, {doc['otherData']['clock']} clock); open it in https://ui.perfetto.dev "
          "or chrome://tracing")
    return 0


def add_explain_commands(sub) -> None:
    ex = sub.add_parser("explain", help="where a run's time went, who waited on whom; --what-if: the run "
                        "calibrated and simulated under each change")
    ex.add_argument("run_dir", help="a real or simulated run's directory")
    ex.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ex.add_argument("--what-if", nargs="+", default=[], metavar="KEY=VALUE",
                    help="changes to simulate on the calibrated run, each its own (e.g. consistency.backup_workers=1)")
    ex.add_argument("--seeds", type=int, default=None,
                    help="seeds per simulated side (--what-if; default psgd.bench.what_if.SEEDS, 3)")
    ex.add_argument("--sim-out", default=None, help="keep the simulated run directories here (--what-if)")
    ex.add_argument("--plot", default=None, help="the timeline PNG (default RUN_DIR/timeline.png; bench extra)")
    ex.add_argument("--no-plot", action="store_true", help="no timeline PNG")
    ex.set_defaults(func=cmd_explain)
    tr = sub.add_parser("trace", help="a run's events as Chrome trace events (Perfetto, chrome://tracing)")
    tr.add_argument("run_dir", help="a real or simulated run's directory")
    tr.add_argument("-o", "--output", default=None, help="where to write it (default RUN_DIR/trace.json)")
    tr.add_argument("--since", type=float, default=0.0, help="window start, seconds of the run's clock")
    tr.add_argument("--until", type=float, default=None, help="window end, seconds of the run's clock")
    tr.add_argument("--max-steps", type=int, default=None,
                    help="worker steps kept before every k-th is sampled (default psgd.bench.trace.MAX_STEPS)")
    tr.set_defaults(func=cmd_trace)
