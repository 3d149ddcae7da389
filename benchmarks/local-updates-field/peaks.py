"""One row per run of a bench (its runs/ folder) with what the bench's CSVs leave out:
the most bytes one push carried (`peak_push_bytes`, streaming DiLoCo's point), the
wire bytes in all and per example, as each run's summary.json has them:

    python benchmarks/local-updates-field/peaks.py RUNS_DIR > runs.csv
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from psgd.bench.run_data import load_run

FIELDS = ["label", "lr", "seed", "peak_push_bytes", "wire_bytes_sent", "wire_bytes_per_example", "worker_steps",
          "time_to_target_s", "final_test_accuracy"]


def main(runs_dir: Path) -> None:
    out = csv.DictWriter(sys.stdout, FIELDS, lineterminator="\n")
    out.writeheader()
    for run_dir in sorted(p for p in runs_dir.iterdir() if (p / "summary.json").is_file()):
        run = load_run(run_dir)
        row = {k: run.summary.get(k) for k in FIELDS}
        row.update(label=run.label, lr=(run.config.get("optimizer") or {}).get("lr"))
        out.writerow(row)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
