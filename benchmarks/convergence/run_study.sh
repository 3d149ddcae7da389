#!/usr/bin/env bash
# Regenerates the committed convergence study in this directory:
#   benchmarks/convergence/run_study.sh
# Two tasks (mlp.yaml, cnn.yaml) x {no straggler, rank 3 slowed 4x} x 8 modes
# x SEEDS seeds, one run at a time. Run directories go to $STUDY_RUNS (default
# /tmp/psgd-study); each case's report.md, summary.csv and plots are copied
# into benchmarks/convergence/<task>-<case>/, and study.log records the
# machine, its load and the timing.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
SEEDS="${SEEDS:-3}"
MODES="${MODES:-allreduce,bsp,ssp:1,ssp:2,ssp:4,ssp:8,asp,asp+sa}"
STUDY_RUNS="${STUDY_RUNS:-/tmp/psgd-study}"
LOG="$HERE/study.log"
mkdir -p "$STUDY_RUNS"

{
  echo "study started $(date -u +%FT%TZ) on $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); seeds $SEEDS; modes $MODES"
} > "$LOG"

for task in cnn mlp; do
  for case in straggler none; do
    name="$task-$case"
    if [ "$case" = straggler ]; then
      sets=(--set 'workers.slowdown={3: 4.0}'); title="$task, 4 workers, rank 3 slowed 4x"
    else
      sets=(); title="$task, 4 workers, no straggler"
    fi
    rm -rf "${STUDY_RUNS:?}/$name"
    start=$(date +%s)
    status=ok
    "$PSGD" bench convergence "benchmarks/convergence/$task.yaml" --modes "$MODES" --seeds "$SEEDS" \
        --out "$STUDY_RUNS/$name" --title "$title" "${sets[@]}" > "$STUDY_RUNS/$name.out" 2>&1 || status="some runs failed"
    mkdir -p "$HERE/$name"
    cp "$STUDY_RUNS/$name"/report.md "$STUDY_RUNS/$name"/summary.csv "$STUDY_RUNS/$name"/*.png "$HERE/$name/"
    echo "$name: $status, $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  done
done
echo "study finished $(date -u +%FT%TZ)" >> "$LOG"
"${PYTHON:-python}" "$HERE/make_report.py"
