"""Run the quickstart with each wire compression and write report.md.

    python benchmarks/wire/make_report.py [--compressions none,fp16,bf16,topk]

Each run is a real `psgd launch configs/quickstart.yaml --set wire.compression=...`;
the table is read from the runs' summary.json (run directories go to a
temporary folder, only the report is kept).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compressions", default="none,fp16")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for comp in args.compressions.split(","):
            out = Path(tmp) / comp
            cmd = [sys.executable, "-m", "psgd.cli", "launch", str(ROOT / "configs" / "quickstart.yaml"),
                   "--set", f"wire.compression={comp}", "--out", str(out), "--quiet"]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return proc.returncode
            s = json.loads((out / "summary.json").read_text())
            rows.append((comp, s))
    lines = ["# Wire compression on the quickstart", "", "Produced by:", "", "```",
             "python benchmarks/wire/make_report.py --compressions " + args.compressions, "```", "",
             f"Machine: {os.cpu_count()} cores, shared (1-minute load average at the end "
             f"{os.getloadavg()[0]:.1f}). compression_ratio = gradient bytes on the wire / fp32 bytes.", "",
             "| compression | final test accuracy | target | time to target s | updates | wire bytes | "
             "compression_ratio |", "|---|---|---|---|---|---|---|"]
    for comp, s in rows:
        lines.append(f"| {comp} | {s['final_test_accuracy']:.4f} | {s['target_accuracy']} | "
                     f"{s['time_to_target_s']} | {s['total_updates']} | {s['wire_bytes_sent']} | "
                     f"{s['compression_ratio']} |")
    (HERE / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
