"""bench scale, simulated against real: 1 shard, 1-64 light workers.

Reads the real `psgd bench scale --json` result, calibrates the simulator's
time model from its smallest-worker point alone (psgd.sim.scale.calibrate_from_point:
shard CPU per request, round trip, step time), simulates every point with the
same gradient size, compute time, warm-up and window, and judges each
updates/s ratio within ±25%. The calibration point itself agrees by
construction; the other points are predictions.

    python benchmarks/sim-validation/scale_compare.py real-scale.json > scale-report.md
"""
from __future__ import annotations

import json
import sys

from psgd.sim.scale import calibrate_from_point, simulate_scale_point

MARGIN = 0.25


def main(path: str) -> None:
    real = json.loads(open(path).read())
    numel = real["grad_bytes"] // 4
    rows = sorted((r for r in real["rows"] if r["shards"] == 1), key=lambda r: r["workers"])
    base = rows[0]
    sim = calibrate_from_point(base, numel)
    out = ["# bench scale: simulated against real (1 shard, light workers)", "",
           f"Real: `psgd bench scale --shards 1 --workers {','.join(str(r['workers']) for r in rows)} "
           f"--window-s {real['window_s']:g}`, {real['grad_bytes'] // 1024} KB gradient, "
           f"{real['compute_ms']:g} ms compute, {real['cores']} cores, load at the end {real['load_avg_end']}.", "",
           f"Simulator calibrated from the real {base['workers']}-worker point only: "
           + ", ".join(f"{k} {v:g}" for k, v in sim.items()) + ".", "",
           "| workers | real updates/s | simulated | sim / real | judged | real pull ms (median) | simulated pull ms "
           "| real shard CPU per request (us) | real load (1 min) |",
           "|---|---|---|---|---|---|---|---|---|"]
    held = 0
    for r in rows:
        s = simulate_scale_point(1, r["workers"], numel, sim, window_s=real["window_s"])
        ratio = s["updates_per_s"] / r["updates_per_s"] if r["updates_per_s"] else float("inf")
        ok = abs(ratio - 1) <= MARGIN
        held += ok and r is not base
        verdict = "calibration point" if r is base else ("within ±25%" if ok else "misses")
        out.append(f"| {r['workers']} | {r['updates_per_s']:.1f} | {s['updates_per_s']:.1f} | {ratio:.2f} | "
                   f"{verdict} | {r['pull_latency_ms_median']} | {s['pull_latency_ms_median']} | "
                   f"{1e6 * r['shard_cpu_cores'] / r['updates_per_s']:.0f} | {r['load_avg_1m']} |")
    out += ["", f"**{held} of {len(rows) - 1} predicted points within ±25%.**", ""]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
