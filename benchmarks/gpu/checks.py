"""The checks benchmarks/gpu/run.sh runs, one subcommand each; run.sh gives each its own timeout.

Every check runs the psgd command a user would (`python -m psgd.cli ...`, the
interpreter this script runs under), judges what it printed or wrote, and
writes one JSON file into the output folder: {"check", "device", "status",
"detail", "commands", ...}. It exits 1 when the check failed, naming why on
stderr. With --device cpu (run.sh --dry) the same code runs at tiny sizes and
each JSON says what it stood in for ("skipped"): a machine without a GPU
keeps the script from rotting, it proves nothing about CUDA.

    python benchmarks/gpu/checks.py source-hash
    python benchmarks/gpu/checks.py deps pyzmq crc32c mnist1d
    python benchmarks/gpu/checks.py {doctor,quickstart,comm,overlap,mnist1d,sim-batched,codecs} --device D --out DIR --work DIR
    python benchmarks/gpu/checks.py report --out DIR --work DIR --steps FILE
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
from pathlib import Path

# Beside this script:
from check_kit import (
    DRY_SKIPS,
    MNIST1D,
    QUICKSTART,
    SUMMARY_KEYS,
    command_line,
    failed_run,
    gpu_count,
    keep_log,
    launch,
    num,
    on_device,
    psgd,
    result,
    worker_devices,
    write,
)
from wheel_sources import dependency_specs, source_hash

# Per device: what each check runs. cuda is the real check; cpu the dry run's stand-in.
SIZES = {
    "quickstart_steps": {"cuda": None, "cpu": 20},       # None: the config's 500 per worker
    "exact_steps": {"cuda": 50, "cpu": 10},
    "comm": {"cuda": ["--sizes", "19KB,1MB,64MB", "--repeats", "20"], "cpu": ["--sizes", "64KB", "--repeats", "3"]},
    "overlap": {"cuda": ["--size", "16MB"], "cpu": ["--size", "256KB", "--runs", "1", "--rounds", "1", "--steps", "3"]},
    "mnist1d": {"cuda": [], "cpu": ["cluster.workers=2", "train.max_time_s=1", "task.model_args.channels=16",
                                    "eval.every_s=0.5"]},
    # sim-256: (workers on the device, workers on the CPU, simulated steps each, extra settings)
    "sim_scale": {"cuda": (256, 16, 20, []),
                  "cpu": (8, 2, 3, ["task.model_args.channels=16", "task.dataset_args={num_samples: 400}"])},
}


# ---- the checks ----------------------------------------------------------------------
def check_doctor(device: str, out: Path, work: Path) -> int:
    """`psgd doctor --device cuda --json`: on a GPU every finding passes, the cuda exactness
    among them, and the round trip is staged through pinned memory; without one it must say
    cuda is missing (and still run the system checks)."""
    args = ("doctor", "--device", "cuda", "--json")
    proc = psgd(work, *args)
    keep_log(work, "doctor", proc)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return write(out, "doctor", result("doctor", device, False, f"no JSON from doctor ({failed_run(proc)})",
                                           [command_line(*args)]))
    found = {f["name"]: f for f in report["findings"]}
    system = [n for n in ("shared_memory", "curvezmq", "network_namespaces") if n in found]
    if device == "cuda":
        exact, trip = found.get("cuda: bsp = allreduce"), found.get("cuda: round trip")
        ok = proc.returncode == 0 and report["ok"] and exact is not None and trip is not None \
            and trip["status"] == "ok" and trip["data"].get("pinned") is True
        detail = ("all checks passed: " + "; ".join(f"{n}: {found[n]['detail']}" for n in found if n.startswith("cuda"))
                  if ok else f"failed: {', '.join(report['failed']) or 'the cuda findings are missing or unpinned'}")
    else:
        ok = proc.returncode == 1 and report["failed"] == ["cuda"] and len(system) == 3 \
            and any(m.startswith("cuda:") for m in report["missing_devices"])
        statuses = ", ".join(f"{n} {found[n]['status']}" for n in system)
        detail = (f"no GPU: doctor reported cuda missing and ran the system checks ({statuses})" if ok
                  else f"unexpected doctor result without a GPU ({failed_run(proc)})")
    return write(out, "doctor", result("doctor", device, ok, detail, [command_line(*args)], doctor=report))


def check_quickstart(device: str, out: Path, work: Path) -> int:
    """The quickstart with its workers on `device`, then BSP with plain SGD against the
    all-reduce baseline (NCCL on cuda) on the quickstart's model: final parameters within
    the doctor's tolerance for the device."""
    from psgd.cli import main as child_main  # forked children run it, as under `psgd launch`
    from psgd.config import load_config
    from psgd.orchestrate.doctor import bsp_matches_allreduce
    sets = [f"workers.device={device}", "checkpoint.enabled=false"]
    if SIZES["quickstart_steps"][device]:
        sets.append(f"train.steps_per_worker={SIZES['quickstart_steps'][device]}")
    proc, run_dir, summary = launch(work, "quickstart", QUICKSTART, sets)
    commands = [command_line("launch", "configs/quickstart.yaml", *[f"--set {s}" for s in sets])]
    devices = worker_devices(run_dir) if (run_dir / "metrics.jsonl").is_file() else []
    quick = {"summary": {k: summary.get(k) for k in SUMMARY_KEYS}, "worker_devices": devices}
    if proc.returncode != 0 or summary.get("status") != "ok" or not on_device(devices, device):
        return write(out, "quickstart", result("quickstart", device, False, f"the quickstart on {device} failed: "
                                               f"{failed_run(proc)}; workers on {devices}", commands, quickstart=quick))
    workers = gpu_count() if device == "cuda" else 2  # NCCL: one rank per GPU
    steps = SIZES["exact_steps"][device]
    exact_sets = [f"workers.device={device}", f"cluster.workers={workers}", f"train.steps_per_worker={steps}",
                  "optimizer.momentum=0.0", "checkpoint.enabled=false", "eval.every_s=5"]
    job = lambda mode: load_config(QUICKSTART, [*exact_sets, f"consistency.mode={mode}"])  # noqa: E731
    commands.append("python: psgd.orchestrate.doctor.bsp_matches_allreduce on configs/quickstart.yaml with "
                    + " ".join(f"--set {s}" for s in exact_sets) + " --set consistency.mode={bsp,allreduce}")
    finding = bsp_matches_allreduce(job, work / "exact", child_main)
    ok = finding.status.value == "ok"
    detail = (f"quickstart on {', '.join(devices)}: accuracy {num(summary.get('final_test_accuracy'))} in "
              f"{summary.get('wall_time_s')} s; "
              f"bsp = allreduce: {finding.detail}")
    return write(out, "quickstart", result("quickstart", device, ok, detail, commands, quickstart=quick,
                                           exactness=finding.as_dict()))


def check_comm(device: str, out: Path, work: Path) -> int:
    """`psgd bench comm --device D`: psgd's round trip from device memory (pinned staging)
    against the copies alone and a torch.rpc PS, at each size."""
    args = ("bench", "comm", "--device", device, "--shards", "1", *SIZES["comm"][device], "--json")
    proc = psgd(work, *args)
    keep_log(work, "comm", proc)
    if proc.returncode != 0:
        return write(out, "comm", result("comm", device, False, f"bench comm failed: {failed_run(proc)}",
                                         [command_line(*args)]))
    bench = json.loads(proc.stdout)
    rows = bench["rows"]
    ok = bool(rows) and all(r["psgd_ms"] > 0 and r["torch_rpc_ms"] > 0 for r in rows) \
        and (device != "cuda" or all(r["pinned"] for r in rows))
    detail = "; ".join(f"{r['size_bytes'] / 2**20:g} MiB: psgd {r['psgd_ms']:.3f} ms (pinned {r['pinned']}), "
                       f"copies {r['copies_pinned_ms']:.3f} ms, torch.rpc {r['torch_rpc_ms']:.3f} ms "
                       f"(x{r['torch_rpc_over_psgd']:.2f} psgd)" for r in rows)
    return write(out, "comm", result("comm", device, ok, detail, [command_line(*args)], bench=bench))


def check_overlap(device: str, out: Path, work: Path) -> int:
    """`psgd bench overlap --device D`: compute is fitted to the measured communication
    (compute ~ communication), then overlap off, pipeline and backward are timed."""
    args = ("bench", "overlap", "--device", device, *SIZES["overlap"][device], "--json")
    proc = psgd(work, *args)
    keep_log(work, "overlap", proc)
    if proc.returncode != 0:
        return write(out, "overlap", result("overlap", device, False, f"bench overlap failed: {failed_run(proc)}",
                                            [command_line(*args)]))
    bench = json.loads(proc.stdout)
    ratio = bench["compute_s"] / bench["comm_s"]
    of_ideal = {k: statistics.median(p["of_ideal"]) for k, p in bench["points"].items()}
    detail = (f"{bench['size_bytes'] / 2**20:.2f} MiB, compute / communication {ratio:.2f}; steps/s of the ideal: "
              + ", ".join(f"{k} {v:.2f}" for k, v in of_ideal.items()))
    return write(out, "overlap", result("overlap", device, bool(of_ideal), detail, [command_line(*args)],
                                        compute_over_comm=ratio, of_ideal=of_ideal, bench=bench))


def check_mnist1d(device: str, out: Path, work: Path) -> int:
    """The MNIST-1D CNN study config for real on `device`, 4 workers, ASP then BSP, one
    seed; each run's per-step compute times calibrated into the simulator's `sim:` section."""
    modes, commands, ok, why = {}, [], True, []
    for mode in ("asp", "bsp"):
        sets = [f"consistency.mode={mode}", f"workers.device={device}", "checkpoint.enabled=false",
                *SIZES["mnist1d"][device]]
        proc, run_dir, summary = launch(work, f"mnist1d-{mode}", MNIST1D, sets)
        commands.append(command_line("launch", "benchmarks/convergence/mnist1d.yaml", *[f"--set {s}" for s in sets]))
        if proc.returncode != 0 or summary.get("status") != "ok":
            ok = False
            why.append(f"{mode}: {failed_run(proc)}")
            continue
        # What `psgd sim calibrate RUN_DIR --json` prints, without another interpreter.
        from psgd.config import ConfigError
        from psgd.sim.calibrate import calibrate
        commands.append(command_line("sim", "calibrate", f"mnist1d-{mode}", "--json"))
        try:
            found = calibrate(run_dir)
        except (ConfigError, ValueError) as exc:
            ok = False
            why.append(f"{mode}: calibrate: {exc}")
            continue
        calibrated = {"sim": found.sim, "evidence": found.evidence}
        devices = worker_devices(run_dir)
        if not on_device(devices, device):
            ok = False
            why.append(f"{mode}: workers on {devices}")
        modes[mode] = {"summary": {k: summary.get(k) for k in SUMMARY_KEYS}, "worker_devices": devices,
                       "run_dir": f"runs.tar.gz: mnist1d-{mode}/", **calibrated}
    detail = "; ".join(f"{m}: accuracy {num(d['summary']['final_test_accuracy'])}, time to target "
                       f"{num(d['summary']['time_to_target_s'], '.2f', ' s')}, {d['summary']['updates_per_s']} updates/s, "
                       f"compute {d['evidence']['compute_ms_median']:.3f} ms a step (median)"
                       for m, d in modes.items()) if ok else "; ".join(why)
    return write(out, "mnist1d", result("mnist1d", device, ok, detail, commands, modes=modes,
                                        simulator_reads="each run directory in runs.tar.gz (config.yaml, "
                                        "metrics.jsonl: every step's compute_s) through `psgd sim calibrate DIR`; "
                                        "modes.*.sim is the sim: section it gives"))


def check_codecs(device: str, out: Path, work: Path) -> int:
    """The push codecs on `device` against the CPU (codecs_check.py), imported only here: it
    needs torch, which the report and the checks that only run psgd commands do without."""
    from codecs_check import check_codecs as run
    return run(device, out, work)


def check_sim_batched(device: str, out: Path, work: Path) -> int:
    """The simulator's batched-gradient path on `device` against the CPU (sim_batched.py).
    Its JSON goes into the work folder (runs.tar.gz), not `out`: the device tool returns
    at most 8 files and the other checks fill them; checks.json carries its finding."""
    sys.path.insert(0, str(Path(__file__).parent))
    from sim_batched import measure
    command = f"python benchmarks/gpu/checks.py sim-batched --device {device}"
    try:
        found = measure(MNIST1D, device, work)
    except Exception as exc:  # noqa: BLE001 - the check's finding, not a crash of the script
        return write(work, "sim-batched", result("sim-batched", device, False, f"{type(exc).__name__}: {exc}",
                                                 [command]))
    bad = [r for r in found["rows"] if r["within_rtol"] < found["within_share"] * r["workers"]]
    detail = "; ".join(f"{r['workers']} workers: cpu {r['cpu_s'] * 1e3:.1f} ms, {device} {r['device_s'] * 1e3:.2f} ms "
                       f"a call (x{r['cpu_over_device']:.1f}), {r['within_rtol']} within {found['grad_rtol']:g} "
                       f"(worst {r['max_relative_error']:.1e}; float64 against cpu {r['worst_cpu_vs_float64']:.1e}, "
                       f"{device} {r['worst_device_vs_float64']:.1e})" for r in found["rows"])
    if bad:
        detail = f"fewer than {found['within_share']:.0%} of the workers agree: " + detail
    return write(work, "sim-batched", result("sim-batched", device, not bad, detail, [command], **found))


def check_sim_scale(device: str, out: Path, work: Path) -> int:
    """`psgd launch --on sim` of the MNIST-1D CNN study config with many workers and their
    gradients on `device` (sim.gradient_device, batched), against the same run with fewer
    workers on the CPU: each run's real seconds, and the CPU's scaled to as many workers.
    Its JSON travels in runs.tar.gz, as sim-batched's does."""
    many, few, steps, extra = SIZES["sim_scale"][device]
    runs, commands, why = {}, [], []
    for name, workers, where in (("device", many, device), ("cpu", few, "cpu")):
        sets = [f"cluster.workers={workers}", f"sim.gradient_device={where}", "sim.batched=true",
                f"train.steps_per_worker={steps}", "train.max_time_s=3600", "checkpoint.enabled=false", *extra]
        proc, _, summary = launch(work, f"sim-{name}", MNIST1D, sets, on="sim")
        commands.append(command_line("launch", "benchmarks/convergence/mnist1d.yaml", "--on sim",
                                     *[f"--set {s}" for s in sets]))
        gradients = summary.get("sim_gradients") or {}
        if proc.returncode != 0 or summary.get("status") != "ok":
            why.append(f"{name}: {failed_run(proc)}")
        elif gradients.get("device") != where or gradients.get("fallback"):
            why.append(f"{name}: gradients on {gradients.get('device')} (fallback: {gradients.get('fallback')})")
        runs[name] = {"workers": workers, "gradient_device": where, "real_time_s": summary.get("real_time_s"),
                      "sim_gradients": gradients, "summary": {k: summary.get(k) for k in SUMMARY_KEYS}}
    if why:
        return write(work, "sim-scale", result("sim-scale", device, False, "; ".join(why), commands, runs=runs))
    scaled_cpu_s = runs["cpu"]["real_time_s"] * many / few
    detail = (f"{many} workers x {steps} steps on {device}: {runs['device']['real_time_s']:.1f} s real, simulated "
              f"accuracy {num(runs['device']['summary']['final_test_accuracy'])}; cpu at {few} workers "
              f"{runs['cpu']['real_time_s']:.1f} s, scaled to {many}: {scaled_cpu_s:.1f} s "
              f"(x{scaled_cpu_s / runs['device']['real_time_s']:.1f} the device)")
    return write(work, "sim-scale", result("sim-scale", device, True, detail, commands, runs=runs,
                                          scaled_cpu_s=scaled_cpu_s))


# ---- report ------------------------------------------------------------------------
ARCHIVED = ("config.yaml", "metrics.jsonl", "summary.json")
TRAVEL_IN_ARCHIVE = ("sim-batched.json", "codecs.json", "sim-scale.json")  # checks' JSON beyond the 8 files a device run returns


def gpu_names(out: Path) -> str:
    """The GPUs doctor saw, with torch's CUDA version (from doctor.json), or 'a GPU'."""
    try:
        env = json.loads((out / "doctor.json").read_text())["doctor"]["environment"]
    except (OSError, KeyError, json.JSONDecodeError):
        return "a GPU"
    names = ", ".join(d["name"] for d in env["cuda"]["devices"]) or "a GPU"
    return f"{names} (torch {env['versions']['torch']}, CUDA {env['cuda']['runtime']}, driver {env['cuda']['driver']})"


def report(out: Path, work: Path, steps_file: Path, dry: bool, seconds: float) -> int:
    """checks.json and report.md from the steps run.sh recorded and each check's JSON;
    runs.tar.gz with the run directories the simulator reads and every log."""
    steps = [json.loads(ln) for ln in steps_file.read_text().splitlines() if ln.strip()] \
        if steps_file.is_file() else []
    for s in steps:
        doc = out / f"{s['name']}.json"
        if not doc.is_file():
            doc = work / f"{s['name']}.json"  # sim-batched's and codecs': they travel in runs.tar.gz
        if doc.is_file():
            s["detail"] = json.loads(doc.read_text())["detail"]
        elif s.get("rc") in (124, 137):  # timeout's codes: the check wrote nothing
            s["detail"] = f"timed out after its {s['limit_s']} s"
        elif s["status"] == "failed":
            s["detail"] = f"exit {s['rc']} without a result: logs/run-{s['name']}.log in runs.tar.gz"
        elif s["status"] == "skipped" and "detail" not in s and not dry:
            s["detail"] = "not run: the install failed"
        s.setdefault("detail", "")
        if dry and s["name"] in DRY_SKIPS:
            s["skipped"] = DRY_SKIPS[s["name"]]
    first = next((s["name"] for s in steps if s["status"] == "failed"), None)
    skipped = [f"{s['name']}: {s.get('skipped') or s['detail']}" for s in steps
               if s.get("skipped") or s["status"] == "skipped"]
    index = {"dry": dry, "ok": first is None, "first_failed": first, "seconds": round(seconds, 1),
             "steps": steps, "skipped": skipped}
    (out / "checks.json").write_text(json.dumps(index, indent=1) + "\n")
    lines = [f"# psgd on {'CPU (dry run: the CUDA parts skipped)' if dry else gpu_names(out)}", "",
             f"`bash benchmarks/gpu/run.sh{' --dry' if dry else ''}`: {round(seconds)} s, "
             + ("every check passed." if first is None else f"first failure: **{first}**."), "",
             "| check | status | seconds | what it found |", "|---|---|---|---|"]
    lines += [f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {s.get('detail', '').replace('|', '/')} |"
              for s in steps]
    if skipped:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in skipped]
    lines += ["", "Files: checks.json (this table), doctor.json, quickstart.json, comm.json, overlap.json, "
              "mnist1d.json (each check's command and output), runs.tar.gz (the MNIST-1D run directories "
              "for `psgd sim calibrate`, sim-batched.json, codecs.json, every check's log)."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for run_dir in sorted(work.glob("mnist1d-*")) + [work / "quickstart", work / "codecs-quickstart"]:
            for name in ARCHIVED:
                if (run_dir / name).is_file():
                    tar.add(run_dir / name, arcname=f"{run_dir.name}/{name}")
        for name in TRAVEL_IN_ARCHIVE:
            if (work / name).is_file():
                tar.add(work / name, arcname=name)
        for log in sorted((work / "logs").glob("*.log")) if (work / "logs").is_dir() else []:
            tar.add(log, arcname=f"logs/{log.name}")
    if skipped:
        print("skipped:\n" + "\n".join(f"  {s}" for s in skipped))
    return 0


CHECKS = {"doctor": check_doctor, "quickstart": check_quickstart, "comm": check_comm, "overlap": check_overlap,
          "mnist1d": check_mnist1d, "sim-batched": check_sim_batched, "codecs": check_codecs,
          "sim-scale": check_sim_scale}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("source-hash")
    deps = sub.add_parser("deps")
    deps.add_argument("names", nargs="+")
    for name in CHECKS:
        c = sub.add_parser(name)
        c.add_argument("--device", choices=("cpu", "cuda"), required=True)
        c.add_argument("--out", type=Path, required=True)
        c.add_argument("--work", type=Path, required=True)
    r = sub.add_parser("report")
    for a in ("--out", "--work", "--steps"):
        r.add_argument(a, type=Path, required=True)
    r.add_argument("--dry", action="store_true")
    r.add_argument("--seconds", type=float, required=True)
    args = p.parse_args()
    if args.what == "source-hash":
        print(source_hash())
        return 0
    if args.what == "deps":
        print("\n".join(dependency_specs(args.names)))
        return 0
    if args.what == "report":
        return report(args.out, args.work, args.steps, args.dry, args.seconds)
    return CHECKS[args.what](args.device, args.out, args.work)


if __name__ == "__main__":
    sys.exit(main())
