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
# REUSE_REAL=1: keep the committed real figures (real-CASE-summary.csv, real-staleness.csv)
# and make only the one real run calibration needs (asp, no straggler, seed 0): about
# 18 minutes. The real results and their run.log lines then stay as committed.
# CALIBRATED=FILE TAG=NAME: as REUSE_REAL=1 but with no real run at all: the simulated
# cases run on the config FILE (a sim: section given, not calibrated here) and the
# comparison goes to report-NAME.md (a sensitivity check; the committed sim summaries stay).
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

load() { cut -d' ' -f1-3 /proc/loadavg; }
started="started $(date -u +%FT%TZ) on $(nproc) cores, load $(load); commit $(git rev-parse --short HEAD)"
REUSE_REAL="${REUSE_REAL:-0}"
if [ -n "${CALIBRATED:-}" ] || [ "$REUSE_REAL" = 1 ]; then
  REUSE_REAL=1
fi
if [ "$REUSE_REAL" = 1 ]; then
  echo "$started: REUSE_REAL=1, real figures as committed (above)" >> "$HERE/run.log"
  for c in $CASES; do  # the committed real summaries stand in for the real benches
    rm -rf "${RUNS:?}/real-$c" && mkdir -p "$RUNS/real-$c"
    cp "$HERE/real-$c-summary.csv" "$RUNS/real-$c/summary.csv"
  done
  rm -rf "${RUNS:?}/real-calibration"
  if [ -z "${CALIBRATED:-}" ]; then
    "$PSGD" bench convergence "$CONFIG" --modes asp --seeds 1 --out "$RUNS/real-calibration" \
        --title "real, none, calibration" > "$RUNS/real-calibration.out" 2>&1
    echo "real calibration run (none, asp, seed 0) done $(date -u +%T), load $(load)" >> "$HERE/run.log"
    calibration_run="$(ls -d "$RUNS"/real-calibration/runs/asp-seed0)"
  fi
else
  echo "$started" > "$HERE/run.log"
  for c in $CASES; do
    case_sets "$c"
    rm -rf "${RUNS:?}/real-$c"
    "$PSGD" bench convergence "$CONFIG" --modes "$MODES" --seeds "$REAL_SEEDS" --out "$RUNS/real-$c" \
        --title "real, $c" "${CASE_ARGS[@]}" > "$RUNS/real-$c.out" 2>&1
    echo "real $c done $(date -u +%T), load $(load)" >> "$HERE/run.log"
    cp "$RUNS/real-$c/summary.csv" "$HERE/real-$c-summary.csv"
  done
  "$PYTHON" "$HERE/compare.py" --real-staleness "$RUNS" $CASES > "$HERE/real-staleness.csv"
  calibration_run="$(ls -d "$RUNS"/real-none/runs/asp-seed0)"
fi
if [ -n "${CALIBRATED:-}" ]; then
  cp "$CALIBRATED" "$RUNS/calibrated.yaml"
  echo "  simulated on $CALIBRATED (no calibration run), report-${TAG:?}.md" >> "$HERE/run.log"
else
  "$PSGD" sim calibrate "$calibration_run" --out "$RUNS/calibrated.yaml" > "$HERE/calibration.txt"
fi
for c in $CASES; do
  case_sets "$c"
  rm -rf "${RUNS:?}/sim-$c"
  "$PSGD" bench convergence "$RUNS/calibrated.yaml" --on sim --modes "$MODES" --seeds "$SIM_SEEDS" \
      --out "$RUNS/sim-$c" --title "simulated, $c" "${CASE_ARGS[@]}" > "$RUNS/sim-$c.out" 2>&1
  echo "sim $c done $(date -u +%T), load $(load)" >> "$HERE/run.log"
  [ -n "${CALIBRATED:-}" ] || cp "$RUNS/sim-$c/summary.csv" "$HERE/sim-$c-summary.csv"
done
if [ -n "${CALIBRATED:-}" ]; then
  { echo "> Sensitivity check: simulated on \`$CALIBRATED\`, a sim: section given, not calibrated by this run (see README.md)."
    echo; "$PYTHON" "$HERE/compare.py" "$RUNS" $CASES; } > "$HERE/report-$TAG.md"
else
  "$PYTHON" "$HERE/compare.py" "$RUNS" $CASES > "$HERE/report.md"
fi
echo "finished $(date -u +%FT%TZ)" >> "$HERE/run.log"
