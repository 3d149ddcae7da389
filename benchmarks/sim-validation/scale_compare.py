"""bench scale, simulated against real: 1 shard, 1-64 light workers.

Reads the real `psgd bench scale --json` result and calibrates the simulator's
time model from two of its points: the smallest-worker point (psgd.bench.scale_sim.
calibrate_from_point: shard CPU per request, round trip, step time) and one
loaded point (LOADED workers, default 32), whose lower shard CPU per request
splits the shard's time into a per-request cost and a wake cost paid only by a
request that finds the shard idle (psgd.bench.scale_sim.calibrate_wake, sim.wake_us).
It then simulates every point with the same gradient size, compute time,
warm-up and window, and judges each updates/s ratio within ±25%. The two
calibration points are not counted; the other points are predictions.

    python benchmarks/sim-validation/scale_compare.py real-scale.json [LOADED] > scale-report.md
"""
from __future__ import annotations

import json
import sys

from psgd.bench.scale_sim import calibrate_from_point, calibrate_wake, simulate_scale_point

MARGIN = 0.25


def main(path: str, loaded_workers: int = 32) -> None:
    real = json.loads(open(path).read())
    numel = real["grad_bytes"] // 4
    rows = sorted((r for r in real["rows"] if r["shards"] == 1), key=lambda r: r["workers"])
    base = rows[0]
    loaded = next(r for r in rows if r["workers"] == loaded_workers)
    sim = calibrate_wake(base, loaded, numel, calibrate_from_point(base, numel))
    calibration = (base, loaded)
    out = ["# bench scale: simulated against real (1 shard, light workers)", "",
           f"Real: `psgd bench scale --shards 1 --workers {','.join(str(r['workers']) for r in rows)} "
           f"--window-s {real['window_s']:g}`, {real['grad_bytes'] // 1024} KB gradient, "
           f"{real['compute_ms']:g} ms compute, {real['cores']} cores, load at the end {real['load_avg_end']}.", "",
           f"Simulator calibrated from the real {base['workers']}-worker point (compute, round trip, shard time "
           f"of a lone request) and the {loaded['workers']}-worker point (its shard CPU per request splits that "
           "time into a per-request and a wake cost): " + ", ".join(f"{k} {v:g}" for k, v in sim.items()) + ".", "",
           "| workers | real updates/s | simulated | sim / real | judged | real pull ms (median) | simulated pull ms "
           "| real shard CPU per request (us) | simulated service per request (us) | simulated share of requests "
           "waking the shard | real load (1 min) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    held = 0
    for r in rows:
        s = simulate_scale_point(1, r["workers"], numel, sim, window_s=real["window_s"])
        ratio = s["updates_per_s"] / r["updates_per_s"] if r["updates_per_s"] else float("inf")
        ok = abs(ratio - 1) <= MARGIN
        held += ok and r not in calibration
        verdict = "calibration point" if r in calibration else ("within ±25%" if ok else "misses")
        out.append(f"| {r['workers']} | {r['updates_per_s']:.1f} | {s['updates_per_s']:.1f} | {ratio:.2f} | "
                   f"{verdict} | {r['pull_latency_ms_median']} | {s['pull_latency_ms_median']} | "
                   f"{1e6 * r['shard_cpu_cores'] / r['updates_per_s']:.0f} | {s['service_us_mean']:.0f} | "
                   f"{s['idle_share']:.3f} | {r['load_avg_1m']} |")
    out += ["", f"**{held} of {len(rows) - len(calibration)} predicted points within ±25%.**", ""]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
