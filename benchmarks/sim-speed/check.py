"""Issue 49's acceptance 4, on a quiet machine (CPU timings: not under other load):

    .venv/bin/python benchmarks/sim-speed/check.py [--workers 16] [--steps N]

Times one 1 s round of 2048x2048 fp32 products on one thread (the reference),
runs `psgd bench sim --suite --workers W --json` (results.json here), and checks
that the bench's peak is within 10% of the reference and that, for each of the
four reference models, the path `sim.batched: auto` chose is within 10% of the
faster of serial and batched. Prints one line per check; exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

PEAK_TOLERANCE = 0.10    # the bench's peak against one 1 s round of the same products
CHOSEN_TOLERANCE = 0.10  # the chosen path's CPU per worker step over the faster path's, less 1


def reference_gflops(n: int = 2048, seconds: float = 1.0) -> float:
    torch.set_num_threads(1)
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b, out=out)
    reps, t0 = 0, time.process_time()
    while (elapsed := time.process_time() - t0) < seconds:
        torch.mm(a, b, out=out)
        reps += 1
    return 2 * n ** 3 * reps / elapsed / 1e9


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="16")
    parser.add_argument("--steps", default="0", help="worker steps per point (0: the bench's default)")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    reference = reference_gflops()
    bench = subprocess.run([sys.executable, "-m", "psgd.cli", "bench", "sim", "--suite", "--workers", args.workers,
                            "--steps", args.steps, "--json"], check=True, capture_output=True, text=True)
    results = json.loads(bench.stdout)
    results["reference_gflops"] = round(reference, 2)
    (here / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    failed = 0
    peak = results["gemm_peak"]["gflops"]
    ok = abs(peak / reference - 1) <= PEAK_TOLERANCE
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} peak {peak:.1f} GFLOP/s against one 1 s round's {reference:.1f} "
          f"({100 * (peak / reference - 1):+.1f}%, limit ±{100 * PEAK_TOLERANCE:.0f}%)")
    for model in results["models"]:
        for p in model["points"]:
            ok = p["chosen_over_faster"] <= 1 + CHOSEN_TOLERANCE
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {model['model']} at {p['workers']} workers: chose {p['chosen']}, "
                  f"{p['chosen_over_faster']:.3f} x the faster (serial {p['serial_over_floor']:.3f}, batched "
                  f"{p['batched_over_floor']:.3f} x floor; limit {1 + CHOSEN_TOLERANCE:.2f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
