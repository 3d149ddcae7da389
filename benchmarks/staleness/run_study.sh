#!/usr/bin/env bash
# Regenerates the committed adaptive-staleness study (issue 17) in this directory:
#   benchmarks/staleness/run_study.sh
# For each straggler model (fixed, random, transient):
#   1. `psgd tune staleness` over BOUNDS (successive halving: every bound one
#      seed, the better half SEEDS seeds), timed: its wall time is the cost of
#      finding the best fixed bound by hand;
#   2. `psgd bench convergence` with bsp, asp and ssp:auto (SEEDS seeds each).
# The best fixed bound's numbers are the tuner's own finalist runs (same
# config, same seeds, run minutes apart on the same machine).
# make_report.py then writes report.md from the tune and bench outputs.
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
SEEDS="${SEEDS:-3}"
BOUNDS="${BOUNDS:-1,2,4,8}"
CASES="${CASES:-fixed random transient}"
MODES="${MODES:-bsp,asp,ssp:auto}"
STUDY_RUNS="${STUDY_RUNS:-/tmp/psgd-staleness-study}"
CONFIG="$HERE/digits-cnn.yaml"
LOG="$HERE/study.log"
mkdir -p "$STUDY_RUNS"

case_sets() {
  case "$1" in
    fixed) CASE_ARGS=(--set "workers.slowdown={3: 4.0}") ;;
    random) CASE_ARGS=(--set "workers.delay={dist: exponential, mean: 1.0}") ;;
    transient) CASE_ARGS=(--set "workers.transient=[{rank: 3, start_s: 1.0, duration_s: 2.0, factor: 8.0}]") ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

{
  echo "study started $(date -u +%FT%TZ) on $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); seeds $SEEDS; bounds $BOUNDS; modes $MODES"
} > "$LOG"
status=0
for c in $CASES; do
  case_sets "$c"
  rm -rf "${STUDY_RUNS:?}/$c-tune" "${STUDY_RUNS:?}/$c-bench"
  start=$(date +%s)
  "$PSGD" tune staleness "$CONFIG" --bounds "$BOUNDS" --seeds "$SEEDS" --min-seeds 1 --eta 2 \
      --out "$STUDY_RUNS/$c-tune" "${CASE_ARGS[@]}" > "$STUDY_RUNS/$c-tune.out" 2>&1 || status=1
  tuned=$(( $(date +%s) - start ))
  echo "$tuned" > "$STUDY_RUNS/$c-tune/tuner_seconds"
  echo "$c tune: ${tuned}s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  start=$(date +%s)
  "$PSGD" bench convergence "$CONFIG" --modes "$MODES" --seeds "$SEEDS" --out "$STUDY_RUNS/$c-bench" \
      --title "digits cnn, 4 workers, $c straggler" "${CASE_ARGS[@]}" > "$STUDY_RUNS/$c-bench.out" 2>&1 || status=1
  echo "$c bench: $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  mkdir -p "$HERE/$c"
  cp "$STUDY_RUNS/$c-bench"/report.md "$STUDY_RUNS/$c-bench"/*.csv "$STUDY_RUNS/$c-bench"/*.png "$HERE/$c/" || true
  cp "$STUDY_RUNS/$c-tune"/tune.md "$HERE/$c/tune.md" 2>/dev/null || true
  cp "$STUDY_RUNS/$c-tune"/tune.csv "$STUDY_RUNS/$c-tune"/tuner_seconds "$HERE/$c/" 2>/dev/null || true
  cp "$STUDY_RUNS/$c-tune"/seeds.csv "$HERE/$c/tune_seeds.csv" 2>/dev/null || true
done
echo "study finished $(date -u +%FT%TZ) (exit status $status)" >> "$LOG"
"${PYTHON:-python}" "$HERE/make_report.py" "$STUDY_RUNS" || status=1
exit $status
