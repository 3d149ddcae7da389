"""Seconds from `psgd launch` to the first parameter update, median of several runs.

    python benchmarks/startup/measure_startup.py configs/quickstart.yaml --runs 5

Each run starts `psgd launch CONFIG --quiet` (30 steps per worker, no evaluator
wait) as a fresh process and reads, from its run directory, the training start
time (start.json) and the time of the first worker step (metrics.jsonl); the
first step's push is the first update. Also prints the launch-to-ready part.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(config: str, out: Path) -> tuple[float, float]:
    start = time.time()
    subprocess.run([sys.executable, "-m", "psgd.cli", "launch", config, "--quiet", "--out", str(out),
                    "--set", "train.steps_per_worker=30"], check=True, capture_output=True)
    t0 = json.loads((out / "start.json").read_text())["t0"]
    events = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    first = min(e["t"] for e in events if e.get("event") == "step")
    return t0 - start, t0 + first - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    ready, first = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            r, f = one_run(args.config, Path(tmp) / f"run{i}")
            ready.append(r)
            first.append(f)
    print(json.dumps({"runs": args.runs, "launch_to_ready_s": [round(v, 2) for v in ready],
                      "launch_to_first_update_s": [round(v, 2) for v in first],
                      "median_launch_to_first_update_s": round(statistics.median(first), 2)}))


if __name__ == "__main__":
    main()
