"""`psgd doctor [--json] [--device D ...]`: versions, devices, and what works on this machine."""
from __future__ import annotations

import argparse
import json
import sys


def cmd_doctor(args: argparse.Namespace) -> int:
    from psgd.orchestrate.doctor import (
        DeviceUnavailable,
        available_devices,
        device_checks,
        environment,
        summarise,
        system_checks,
    )
    env = environment()
    if not args.json:
        _print_environment(env)
        if not env["cuda"]["available"]:
            print("no CUDA device here: the GPU checks do not run, the CPU checks do")
    findings = list(system_checks())
    if not args.json:
        for f in findings:
            _print_finding(f)
    devices = args.device or available_devices()
    missing = []
    for device in devices:
        try:
            found = device_checks(device, child_main=args.child_main)
        except DeviceUnavailable as exc:
            missing.append(str(exc))
            continue
        findings += found
        if not args.json:
            for f in found:
                _print_finding(f)
    verdict = summarise(findings)
    verdict["failed"] += [m.split(":")[0] for m in missing]
    verdict["ok"] = not verdict["failed"]
    if args.json:
        print(json.dumps({"environment": env, "findings": [f.as_dict() for f in findings],
                          "missing_devices": missing, **verdict}, indent=2))
    else:
        for m in missing:
            print(f"  FAILED       {m}")
        print("psgd doctor: all checks passed" if verdict["ok"] else
              f"psgd doctor: failed: {', '.join(verdict['failed'])}")
    if not verdict["ok"] and args.json:
        print(f"psgd doctor: failed: {', '.join(verdict['failed'])}", file=sys.stderr)
    return 0 if verdict["ok"] else 1


def _print_environment(env: dict) -> None:
    v, cpu, cuda = env["versions"], env["cpu"], env["cuda"]
    print("versions: " + ", ".join(f"{k} {v[k] or 'not installed'}" for k in v))
    print(f"cpu: {cpu['cores']} cores ({cpu['machine']})")
    if cuda["available"]:
        for d in cuda["devices"]:
            print(f"cuda:{d['index']}: {d['name']}, {d['memory_gib']} GiB, compute capability {d['capability']}")
        print(f"cuda runtime {cuda['runtime']}, driver {cuda['driver'] or 'unknown'}, "
              f"nccl {cuda['nccl'] or 'not available'}")
    else:
        print(f"cuda: no device (torch built with CUDA {cuda['runtime'] or 'none'})")


def _print_finding(f) -> None:
    print(f"  {f.status.value.upper():<12} {f.name}: {f.detail}")


def add_doctor_command(sub) -> None:
    p = sub.add_parser("doctor", help="versions, devices and a short end-to-end check on every device")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--device", action="append", choices=("cpu", "cuda"),
                   help="check only this device (repeatable); default: every device torch sees")
    p.set_defaults(func=cmd_doctor)
