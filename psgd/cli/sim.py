"""`psgd sim calibrate RUN_DIR [--out CONFIG]`: the virtual cluster's time model from a real run;
`psgd sim profile [--device cpu|cuda] [--json] [--out FILE]`: this host's costs, measured apart from any run."""
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


def cmd_sim_profile(args: argparse.Namespace) -> int:
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("psgd sim profile: --device cuda: no CUDA device here (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    problem = _out_problem(out) if out is not None else ""
    if problem:
        print(f"psgd sim profile: {problem}", file=sys.stderr)
        return 2
    from psgd.sim.profile import measure_host_profile
    profile = measure_host_profile(args.device, args.note)
    text = profile.to_json()
    if out is not None:
        try:
            out.write_text(text + "\n")
        except OSError as exc:
            print(f"psgd sim profile: cannot write --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    if args.json:
        print(text)
        return 0
    peak = profile.peak_flops_per_s
    print(f"# {profile.measured_on}")
    print(f"message      {profile.message.fixed_us:9.1f} us + {profile.message.gbytes_per_s:g} GB/s, each end")
    for name in sorted(profile.encode):
        e, d = profile.encode[name], profile.decode[name]
        print(f"codec {name:7s} encode {e.fixed_us:7.1f} us + {e.gbytes_per_s:g} GB/s, "
              f"decode {d.fixed_us:7.1f} us + {d.gbytes_per_s:g} GB/s")
    for rule, a in sorted(profile.apply.items()):
        print(f"shard {rule:8s} {a.fixed_us:7.1f} us per request + {a.gbytes_per_s:g} GB/s of fp32 gradient")
    print(f"matmul peak  {peak / 1e9:.1f} GFLOP/s; achieved fraction by size: " + ", ".join(
        f"{round((f / 2) ** (1 / 3))}: {r / peak:.2f}" for f, r in zip(profile.matmul_flops, profile.matmul_flops_per_s)))
    if profile.conv_flops:
        print("conv1d       GFLOP/s by FLOPs: " + ", ".join(
            f"{f / 1e6:.0f} M: {r / 1e9:.1f}" for f, r in zip(profile.conv_flops, profile.conv_flops_per_s)))
    print(f"dispatch     {profile.dispatch_us:.2f} us per operation ({'kernel launch' if args.device == 'cuda' else 'cpu'})")
    print(f"memory       {profile.memory_gbytes_per_s:g} GB/s (same-host messages)")
    print(f"worker loop  {profile.worker_loop_us:.1f} us per step")
    for label, cost in (("worker step", profile.worker_step_extra), ("worker exch", profile.worker_exchange_extra)):
        if cost is not None:
            print(f"{label}  {cost.fixed_us:9.1f} us + {cost.gbytes_per_s:g} GB/s of the model, beyond its parts")
    if profile.request_client is not None and profile.request_shard is not None:
        c, s = profile.request_client, profile.request_shard
        print(f"request      beyond its parts: worker {c.fixed_us:.1f} us + {c.gbytes_per_s:g} GB/s "
              f"({profile.request_client_send_share:.0%} before it leaves), shard {s.fixed_us:.1f} us + "
              f"{s.gbytes_per_s:g} GB/s, {profile.request_shard_wake_us:.1f} us more when it was asleep")
    if profile.host_to_device_gbytes_per_s:
        print(f"copies       host->device {profile.host_to_device_gbytes_per_s:g} GB/s, "
              f"device->host {profile.device_to_host_gbytes_per_s:g} GB/s")
    if out is not None:
        print(f"# -> {out} (sim.host_profile: {out})")
    return 0


def add_sim_command(sub) -> None:
    sim = sub.add_parser("sim", help="the virtual cluster's tools").add_subparsers(dest="sim", required=True)
    cal = sim.add_parser("calibrate", help="the sim: section that reproduces a real run's compute (and its "
                         "spread), service and round-trip times")
    cal.add_argument("run_dir", help="a real run's directory")
    cal.add_argument("--out", help="also write the run's config with this sim: section here")
    cal.add_argument("--json", action="store_true", help="one JSON object on stdout")
    cal.set_defaults(func=cmd_sim_calibrate)
    prof = sim.add_parser("profile", help="this host's costs (codecs, messages, shard service, matrix products, "
                          "launches, copies, the worker loop), measured without any model, for sim.host_profile")
    prof.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                      help="where the matrix products and launches are timed (cuda: the first GPU)")
    prof.add_argument("--json", action="store_true", help="the profile as JSON on stdout")
    prof.add_argument("--out", help="write the profile (JSON) here")
    prof.add_argument("--note", default=None, help="what the machine is and how it was loaded, kept in the "
                      "profile's notes (the shipped cpu-reference: psgd sim profile --out "
                      "psgd/sim/profiles/cpu-reference.json --note '...')")
    prof.set_defaults(func=cmd_sim_profile)
