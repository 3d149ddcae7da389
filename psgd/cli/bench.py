"""The measurement commands of the `psgd` CLI: benchmarks, staleness tuning, plots.

Kept apart from the run commands so each file stays short; like the rest of
psgd.cli, this is a place that prints.
"""
from __future__ import annotations

import argparse
import json
import sys

from psgd.bench.pyplot import require_matplotlib
from psgd.cli.convergence import add_bench_convergence_command, add_convergence_commands
from psgd.cli.failures import Fail, expected
from psgd.cli.faults import add_bench_faults_command


def _plots_if_out(args: argparse.Namespace) -> None:
    """With --out the report has plots: fail before measuring if they cannot be drawn."""
    if args.out:
        require_matplotlib()


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
    if args.device:
        return _bench_comm_device(args)
    _plots_if_out(args)
    from psgd.bench.comm import run_comm_bench
    from psgd.bench.comm_report import combine_runs, write_comm_report
    from psgd.bench.procs import parse_list, parse_size
    sizes, shards = parse_list(args.sizes, parse_size), parse_list(args.shards)
    if args.runs < 1:
        print("psgd bench comm: --runs must be >= 1", file=sys.stderr)
        return 2

    def show(r: dict) -> None:
        if args.json:
            return
        if r.get("where") == "netns":
            print(f"{r['size_bytes']:>10} B  across namespaces: psgd {r['psgd_ms']:.3f} ms, ZeroMQ floor "
                  f"{r['raw_zmq_sgd_ms']:.3f} ms", file=sys.stderr)
            return
        print(f"{r['size_bytes']:>10} B  {r['shards']} shard(s): psgd {r['psgd_ms']:.3f} ms "
              f"(shared memory: {r['shared_memory']}), psgd shm {r['psgd_shm_ms']:.3f} ms, "
              f"psgd TCP {r['psgd_tcp_ms']:.3f} ms, raw zmq "
              f"{r['raw_zmq_ms']:.3f} ms, zmq floor {r['raw_zmq_sgd_ms']:.3f} ms, shm floor "
              f"{r['shm_floor_ms']:.3f} ms, torch.rpc {r['torch_rpc_ms']:.3f} ms, ray {r['ray_ms']} ms",
              file=sys.stderr)

    results = []
    for i in range(args.runs):
        if args.runs > 1 and not args.json:
            print(f"run {i + 1} of {args.runs}", file=sys.stderr)
        results.append(run_comm_bench(sizes, shards, args.repeats, on_row=show, cross_host=not args.no_cross_host,
                                      ray=not args.no_ray))
    result = combine_runs(results)
    table = [f"{'bytes':>10} {'shards':>6} {'psgd ms':>9} {'psgd TCP':>9} {'zmq floor':>9} {'shm floor':>9} "
             f"{'torch.rpc':>9} {'ray':>9} {'psgd/shm':>8} {'psgd/zmq':>8}"]
    table += [f"{r['size_bytes']:>10} {r['shards']:>6} {r['psgd_ms']:>9.3f} {r['psgd_tcp_ms']:>9.3f} "
              f"{r['raw_zmq_sgd_ms']:>9.3f} {r['shm_floor_ms']:>9.3f} {r['torch_rpc_ms']:>9.3f} "
              f"{r['ray_ms'] if r['ray_ms'] is not None else float('nan'):>9.3f} {r['psgd_over_shm_floor']:>8.3f} "
              f"{r['psgd_over_raw_zmq_sgd']:>8.3f}" for r in result["rows"]]
    table += [f"{r['size_bytes']:>10} {'netns':>6} {r['psgd_ms']:>9.3f} {'':>9} {r['raw_zmq_sgd_ms']:>9.3f} "
              f"{'':>9} {'':>9} {'':>9} {'':>8} {r['psgd_over_raw_zmq_sgd']:>8.3f}" for r in result["cross_host"]]
    return _bench_output(args, result, write_comm_report, table)


def _bench_comm_device(args: argparse.Namespace) -> int:
    """`psgd bench comm --device D`: the round trip from and to D's memory (psgd.bench.comm_device)."""
    from psgd.bench.comm_device import device_comm_table, run_device_comm_bench
    from psgd.bench.procs import parse_list, parse_size
    sizes, shards = parse_list(args.sizes, parse_size), parse_list(args.shards)
    if args.runs != 1:
        print("psgd bench comm: --device measures one run (--runs 1)", file=sys.stderr)
        return 2
    show = None if args.json else (lambda r: print(
        f"{r['size_bytes']:>10} B  {r['shards']} shard(s): psgd {r['psgd_ms']:.3f} ms (pinned: {r['pinned']}), "
        f"pageable {r['psgd_pageable_ms']:.3f} ms, from host {r['psgd_host_ms']:.3f} ms, copies "
        f"{r['copies_pinned_ms']:.3f} ms, torch.rpc {r['torch_rpc_ms']:.3f} ms", file=sys.stderr))
    with expected("psgd bench comm", Fail(ValueError, 2)):
        result = run_device_comm_bench(sizes, shards, args.device, args.repeats, on_row=show)
    lines = device_comm_table(result)
    if args.out:
        from pathlib import Path
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=1))
        (out / "report.md").write_text("# psgd bench comm --device\n\nCommand: `psgd " + " ".join(args.argv)
                                       + "`\n\n" + "\n".join(lines) + "\n")
        print(f"report: {out}/report.md", file=sys.stderr)
    print(json.dumps(result, indent=1) if args.json else "\n".join(lines))
    return 0


def cmd_bench_apply(args: argparse.Namespace) -> int:
    _plots_if_out(args)
    from psgd.bench.apply import run_apply_bench
    from psgd.bench.procs import parse_list, parse_size
    from psgd.bench.report import write_apply_report
    result = run_apply_bench(parse_list(args.sizes, parse_size), parse_list(args.optimizers, str), args.repeats)
    table = [f"{r['optimizer']:>8} {r['size_bytes']:>10} B  {r['median_ms']:8.3f} ms  {r['gb_per_s']:7.2f} GB/s"
             for r in result["rows"]]
    return _bench_output(args, result, write_apply_report, table)


def cmd_bench_scale(args: argparse.Namespace) -> int:
    _plots_if_out(args)
    from psgd.bench.procs import parse_list, parse_size
    from psgd.bench.report import write_scale_report
    from psgd.bench.scale import run_scale_bench
    show = None if args.json else lambda r: print(
        f"{r['shards']} shard(s) {r['workers']:>4} workers: {r['updates_per_s']:8.1f} updates/s, "
        f"pull {r['pull_latency_ms_median']} ms", file=sys.stderr)
    result = run_scale_bench(parse_list(args.shards), parse_list(args.workers), parse_size(args.grad_size),
                             args.compute_ms, window_s=args.window_s, processes=args.processes, on_row=show,
                             paths=parse_list(args.paths, _path), record=args.record)
    table = [f"{s} shard(s): saturates at {v['saturates_at_workers']} workers, peak "
             f"{v['peak_updates_per_s']:.0f} updates/s" for s, v in result["saturation"].items()]
    return _bench_output(args, result, write_scale_report, table)


def cmd_bench_overlap(args: argparse.Namespace) -> int:
    from pathlib import Path

    from psgd.bench.overlap import overlap_table, run_overlap_bench
    from psgd.bench.procs import parse_size
    show = None if args.json else (lambda line: print(line, file=sys.stderr))
    with expected("psgd bench overlap", Fail(ValueError, 2)):
        result = run_overlap_bench(parse_size(args.size), args.compute_ms, args.runs, args.steps, args.rounds,
                                   args.shards, on_line=show or (lambda line: None), device=args.device)
    plain = {**result, "points": {k: {"steps_per_s": p.steps_per_s, "median": p.median, "of_ideal": p.of_ideal,
                                      "of_serial": p.of_serial} for k, p in result["points"].items()}}
    lines = overlap_table(result)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(plain, indent=2))
        (out / "report.md").write_text("# psgd bench overlap\n\nCommand: `psgd " + " ".join(args.argv) + "`\n\n"
                                       + "\n".join(lines) + "\n")
        print(f"report: {out}/report.md", file=sys.stderr)
    print(json.dumps(plain, indent=2) if args.json else "\n".join(lines))
    return 0


def _path(text: str) -> str:
    if text not in ("auto", "off"):
        raise ValueError(f"{text!r} is not a data path (auto or off)")
    return text


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from psgd.bench.sim_speed import SUITE, as_json, measure_model, measure_peak, report_lines
    from psgd.config import ConfigError, load_config
    from psgd.sim.cost import PEAK_SECONDS, PEAK_SIZE
    with expected("psgd bench sim", Fail((ConfigError, ValueError), 2)):
        if args.suite and args.config is not None:
            raise ValueError("--suite measures the four reference models: give no config with it")
        models = ([(name, load_config(None, sets + args.overrides)) for name, sets in SUITE.items()] if args.suite
                  else [(None, load_config(args.config, args.overrides))])
        counts = [int(w) for w in args.workers.split(",")]
        if not counts or min(counts) < 1:
            raise ValueError("--workers: give positive worker counts, e.g. 4,256")
        peak_size, peak_seconds = args.peak_size or PEAK_SIZE, args.peak_seconds or PEAK_SECONDS
        if peak_size < 1 or peak_seconds <= 0:
            raise ValueError("--peak-size and --peak-seconds must be > 0")
    total_steps = args.steps or 20 * max(counts)
    peak = measure_peak(peak_size, peak_seconds)
    measured = [(name, measure_model(cfg, counts, total_steps, peak["gflops"] * 1e9)) for name, cfg in models]
    if args.json:
        print(json.dumps({"gemm_peak": peak, "models": [as_json(name or args.config or "defaults", m)
                                                        for name, m in measured]}, indent=2))
        return 0
    print("CPU seconds; overhead: all but forward+backward, over forward+backward; own: also less the "
          "shards' pushes and pulls (ShardState); /floor: CPU per worker step over the plain loop's; "
          "chosen: the path sim.batched: auto takes")
    for name, m in measured:
        print("\n".join(report_lines(name, m)))
    print(f"peak: {peak['gflops']:.1f} GFLOP/s, the best of {peak['rounds']} rounds of {peak['seconds_per_round']:g} s "
          f"of {peak['size']}x{peak['size']} fp32 products on one thread")
    return 0


def add_measurement_commands(sub) -> None:
    """`psgd bench {convergence,comm,apply,scale,overlap,sim}`, `psgd tune staleness` and `psgd plot`."""
    bench = sub.add_parser("bench", help="reproducible measurements").add_subparsers(dest="bench", required=True)
    comm = bench.add_parser("comm", help="push+pull vs raw ZeroMQ and shared-memory floors, gloo all-reduce, "
                                         "a torch.rpc PS and a Ray actor PS, on one host and across namespaces")
    comm.add_argument("--sizes", default="1MB,10MB,40MB", help="payload sizes (KB/MB/GB)")
    comm.add_argument("--shards", default="1,2", help="shard counts for psgd")
    comm.add_argument("--repeats", type=int, default=30, help="timed round trips per method and size")
    comm.add_argument("--runs", type=int, default=1, help="whole runs; the report gives medians over them")
    comm.add_argument("--no-cross-host", action="store_true",
                      help="skip the rows between two network namespaces (they need root)")
    comm.add_argument("--no-ray", action="store_true", help="skip the Ray actor PS even when ray is installed")
    comm.add_argument("--device", choices=("cpu", "cuda"), default=None,
                      help="instead: the round trip of a worker whose model lives on this device (staged through "
                           "pinned buffers on cuda) against the copies alone and a torch.rpc PS")
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
    scale.add_argument("--record", action="store_true", help="the shards record for replay (run.record)")
    scale.add_argument("--paths", default="auto", help="data paths to measure back to back at each point: "
                       "auto (shared memory on one host), off (TCP), or both: auto,off")
    scale.set_defaults(func=cmd_bench_scale)
    overlap = bench.add_parser("overlap", help="steps/s of a worker with overlap off, pipeline and backward, "
                                               "against the serial and ideal bounds")
    overlap.add_argument("--size", default="4MB", help="model size (its gradient per step)")
    overlap.add_argument("--compute-ms", type=float, default=None,
                         help="emulated compute per step (default: the measured communication time)")
    overlap.add_argument("--runs", type=int, default=3, help="runs, each with its own bounds; the table gives medians")
    overlap.add_argument("--rounds", type=int, default=4,
                         help="blocks per run and variant, every variant's block in turn, in a rotating order")
    overlap.add_argument("--steps", type=int, default=10, help="timed steps per block")
    overlap.add_argument("--shards", type=int, default=1, help="shard processes (1: the worker and one shard)")
    overlap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                         help="where the worker's model lives (cuda: staged through pinned buffers)")
    overlap.set_defaults(func=cmd_bench_overlap)
    sim = bench.add_parser("sim", help="the simulator's own cost, serial, batched and the path sim.batched: auto "
                                       "chooses, against a plain loop and the core's matrix-product peak")
    sim.add_argument("config", nargs="?", default=None, help="the workload (default: the built-in defaults)")
    sim.add_argument("--suite", action="store_true", help="instead: the quickstart MLP, the MNIST-1D CNN at 32 "
                     "and 256 channels and the character transformer (psgd.bench.sim_speed.SUITE)")
    sim.add_argument("--peak-size", type=int, default=None,
                     help="side of the square fp32 products timed for the peak (default 2048)")
    sim.add_argument("--peak-seconds", type=float, default=None,
                     help="CPU seconds per timed round of the peak (default 1; the best of 3 rounds counts)")
    sim.add_argument("--workers", default="4,256")
    sim.add_argument("--steps", type=int, default=0,
                     help="worker steps per point, split over the workers (default: 20 x the largest count)")
    sim.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    sim.set_defaults(func=cmd_bench_sim)
    for p in (comm, apply, scale, overlap, sim):
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--out", default=None, help="write results.json, report.md and plots here")
    add_bench_convergence_command(bench)
    add_bench_faults_command(bench)
    add_convergence_commands(sub)
