"""Quorum merging against synchronous DiLoCo, under a straggler and under a killed worker,
on the virtual cluster and for real (issue 40). Regenerate everything with

    python benchmarks/local-updates-field/quorum.py --seeds 3

(`--parts sim,straggler,kill` picks parts; `--psgd PATH` the psgd to run). Every run is the
quickstart job (configs/quickstart.yaml: 4 workers, 2 shards, the 8x8 digits MLP) as DiLoCo
(bsp, H = 8, inner AdamW 0.01, outer SGD 0.7 with Nesterov 0.9), each step padded to 4 ms of
device time (workers.device_ms; on the simulator sim.compute_ms). Variants: `sync` (every
worker's delta, as today), `quorum` (q = 3 of 4, adaptive grace bounded by 10 ms, about a
third of a fast round) and, on the simulator, `quorum-nograce` (q = 3, merge at the third).
The raw figures go to quorum.json beside this script; the tables are printed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = ROOT / "configs" / "quickstart.yaml"

DILOCO = ["consistency.mode=bsp", "local.steps=8", "local.outer_lr=0.7", "local.outer_momentum=0.9",
          "local.outer_nesterov=true", "optimizer.name=adamw", "optimizer.lr=0.01", "eval.every_s=0.2"]
VARIANTS = {
    "sync": [],
    "quorum": ["consistency.quorum.size=3", "consistency.quorum.grace_s=auto", "consistency.quorum.grace_max_s=0.01"],
    "quorum-nograce": ["consistency.quorum.size=3", "consistency.quorum.grace_s=0"],
}
STRAGGLER = ["workers.slowdown={3: 4.0}"]  # rank 3 takes 4x as long per step
SIM = ["sim.compute_ms=4"]
REAL = ["workers.device=cpu", "workers.device_ms=4"]
# Simulated kill: rank 3 dies at 0.5 s, not restarted; the shards drop it 2 s later (cluster.timeout_s).
SIM_KILL = ["sim.faults.kills=[{rank: 3, at_s: 0.5}]", "cluster.timeout_s=2"]
# Real kills: psgd bench faults SIGKILLs a worker (0, then 1) every 5 s of a 15 s run; the launcher restarts it.
REAL_KILL = ["train.max_time_s=15", "train.steps_per_worker=1000000", "train.target_accuracy=null"]
FIELDS = ("wall_time_s", "time_to_target_s", "final_test_accuracy", "total_updates", "worker_steps",
          "quorum_carried", "quorum_closed_by_grace", "workers_timed_out", "restarts")


def sets(items):
    return [a for item in items for a in ("--set", item)]


def launch(psgd, out: Path, items, sim: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [psgd, "launch", str(CONFIG), "--quiet", "--out", str(out), *sets(items)] + (["--on", "sim"] if sim else [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stdout[-400:]}{done.stderr[-400:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {k: summary.get(k) for k in FIELDS}


def faults(psgd, out: Path, items, seeds: int) -> list[dict]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [psgd, "bench", "faults", str(CONFIG), "--target", "workers", "--kill-every-s", "5", "--seeds", str(seeds),
           "--pairing", "alternate", "--json", "--out", str(out), *sets(items)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode not in (0, 1):  # 1: the goodput floor was missed, which is a result here
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stdout[-400:]}{done.stderr[-400:]}")
    rows = []
    for run in json.loads(done.stdout)["runs"]:
        summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
        rows.append({"label": run["label"], "seed": run["seed"], "goodput_per_s": run["goodput_per_s"],
                     "kills": len(run["kills"]), "lost_s": [r["lost_s"] for r in run["recoveries"]],
                     **{k: summary.get(k) for k in FIELDS}})
    return rows


def median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def table(title, runs: dict[str, list[dict]], keys) -> str:
    lines = [f"### {title}", "", "| variant | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for variant, rows in runs.items():
        cells = []
        for k in keys:
            per_seed = ", ".join("-" if r.get(k) is None else f"{r[k]:g}" for r in rows)
            cells.append(f"{median(rows, k)} ({per_seed})")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--parts", default="sim,straggler,kill")
    ap.add_argument("--psgd", default=str(Path(sys.executable).with_name("psgd")))
    ap.add_argument("--scratch", default="/tmp/psgd-quorum-study")
    args = ap.parse_args()
    scratch, parts = Path(args.scratch), args.parts.split(",")
    out_file = HERE / "quorum.json"
    results = json.loads(out_file.read_text()) if out_file.is_file() else {}
    keys = ["time_to_target_s", "wall_time_s", "final_test_accuracy", "total_updates", "quorum_carried"]
    if "sim" in parts:
        for scenario, extra in (("straggler", STRAGGLER), ("kill", SIM_KILL)):
            runs = {v: [launch(args.psgd, scratch / f"sim-{scenario}-{v}-{s}",
                               DILOCO + SIM + extra + items + [f"run.seed={s}"], sim=True)
                        for s in range(args.seeds)] for v, items in VARIANTS.items()}
            results[f"sim-{scenario}"] = runs
            print(table(f"simulated, {scenario}", runs, keys))
    if "straggler" in parts:
        runs = {v: [launch(args.psgd, scratch / f"real-straggler-{v}-{s}",
                           DILOCO + REAL + STRAGGLER + VARIANTS[v] + [f"run.seed={s}"], sim=False)
                    for s in range(args.seeds)] for v in ("sync", "quorum")}
        results["real-straggler"] = runs
        print(table("real, straggler", runs, keys))
    if "kill" in parts:
        runs = {v: faults(args.psgd, scratch / f"real-kill-{v}", DILOCO + REAL + REAL_KILL + VARIANTS[v], args.seeds)
                for v in ("sync", "quorum")}
        results["real-kill"] = runs
        for v, rows in runs.items():
            print(table(f"real, worker kills every 5 s ({v})",
                        {label: [r for r in rows if r["label"] == label] for label in ("fault-free", "faults")},
                        ["goodput_per_s", "worker_steps", "final_test_accuracy", "quorum_carried", "restarts"]))
    out_file.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
