#!/usr/bin/env bash
# Does the virtual cluster predict real runs? Regenerates this directory in one command:
#   benchmarks/sim-validation/run.sh
# 1. real: the committed MNIST-1D workload (benchmarks/convergence/mnist1d.yaml) on real
#    processes, cases none / straggler (rank 3 slowed 4x) / delay (exponential, mean 1),
#    modes MODES, REAL_SEEDS seeds each (psgd bench convergence);
# 2. calibrate: `psgd sim calibrate` on one real run of the no-straggler case gives the
#    sim: section (compute, shard service, round trip) of this machine;
# 3. simulated: the same cases and modes on the calibrated config, SIM_SEEDS seeds;
# 4. compare.py: median held time to target, staleness mean and max, simulated / real,
#    each judged within ±25% (report.md).
# About 25 minutes on 2 quiet cores. Run directories go to $RUNS.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
PYTHON="${PYTHON:-python3}"
MODES="${MODES:-bsp,asp}"
REAL_SEEDS="${REAL_SEEDS:-3}"
SIM_SEEDS="${SIM_SEEDS:-5}"
CASES="${CASES:-none straggler delay}"
RUNS="${RUNS:-/tmp/psgd-sim-validation}"
CONFIG=benchmarks/convergence/mnist1d.yaml
mkdir -p "$RUNS"

case_sets() {
  case "$1" in
    none) CASE_ARGS=() ;;
    straggler) CASE_ARGS=(--set "workers.slowdown={3: 4.0}") ;;
    delay) CASE_ARGS=(--set "workers.delay={dist: exponential, mean: 1.0}") ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

echo "started $(date -u +%FT%TZ) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)" > "$HERE/run.log"
for c in $CASES; do
  case_sets "$c"
  rm -rf "${RUNS:?}/real-$c"
  "$PSGD" bench convergence "$CONFIG" --modes "$MODES" --seeds "$REAL_SEEDS" --out "$RUNS/real-$c" \
      --title "real, $c" "${CASE_ARGS[@]}" > "$RUNS/real-$c.out" 2>&1
  echo "real $c done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/run.log"
done
calibration_run="$(ls -d "$RUNS"/real-none/runs/asp-seed0)"
"$PSGD" sim calibrate "$calibration_run" --out "$RUNS/calibrated.yaml" > "$HERE/calibration.txt"
for c in $CASES; do
  case_sets "$c"
  rm -rf "${RUNS:?}/sim-$c"
  "$PSGD" bench convergence "$RUNS/calibrated.yaml" --on sim --modes "$MODES" --seeds "$SIM_SEEDS" \
      --out "$RUNS/sim-$c" --title "simulated, $c" "${CASE_ARGS[@]}" > "$RUNS/sim-$c.out" 2>&1
  echo "sim $c done $(date -u +%T)" >> "$HERE/run.log"
done
"$PYTHON" "$HERE/compare.py" "$RUNS" $CASES > "$HERE/report.md"
echo "finished $(date -u +%FT%TZ)" >> "$HERE/run.log"
