#!/usr/bin/env bash
# Regenerates the committed convergence study in this directory, in one command:
#   benchmarks/convergence/run_study.sh
# For each workload (mnist1d.yaml, charlm.yaml):
#   1. learning rates: every mode on the no-straggler case over the workload's
#      LR grid with LR_SEEDS seeds; each mode's best rate is kept (<workload>-lr/)
#   2. every case (none, straggler, delay) x every mode at its chosen rate x
#      SEEDS seeds (<workload>-<case>/: report.md, summary.csv, seeds.csv, plots)
#   3. mnist1d only, the "many" case for the staleness-aware claim (Zhang et
#      al. 2016 need large staleness): 16 light workers (64-channel CNN) and
#      MANY_MODES, with a learning-rate grid of its own (<workload>-many-lr/),
#      since rates chosen for 4 workers do not carry over to 16
# then verdicts.md (literature claims judged from the intervals) is computed
# from the cases' seeds.csv files. Run directories go to $STUDY_RUNS; study.log
# records the machine, its load and the time each step took.
#
# The full study is 2 workloads x (10 modes x 3 rates x 1 seed + 3 cases x 10
# modes x 3 seeds) + the many case (3 modes x 3 rates x 1 seed + 3 modes x 3
# seeds) = 258 runs of 18 s of training, about 21 s each with start-up: about
# 90 min. Knobs for a smaller one: WORKLOADS, CASES_<workload>, MODES,
# MANY_MODES, SEEDS, LR_GRID_<workload> (empty: skip the grids and use the
# config's rate with optimizer.lr_scaling: linear), EXTRA_SETS (--set strings
# for every run), REUSE_LR=1 (keep the rates an earlier run chose in
# $STUDY_RUNS and append to study.log: to add a case without redoing the rest).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
SEEDS="${SEEDS:-3}"
LR_SEEDS="${LR_SEEDS:-1}"
WORKLOADS="${WORKLOADS:-mnist1d charlm}"
CASES_mnist1d="${CASES_mnist1d-none straggler delay many}"
CASES_charlm="${CASES_charlm-none straggler delay}"
MANY_MODES="${MANY_MODES:-bsp,asp,asp+sa}"
MODES="${MODES:-allreduce,bsp,bsp+b1,ssp:1,ssp:2,ssp:4,ssp:8,asp,asp+sa,asp+dc}"
LR_GRID_mnist1d="${LR_GRID_mnist1d-0.05,0.1,0.2}"
LR_GRID_charlm="${LR_GRID_charlm-0.001,0.003,0.006}"
STUDY_RUNS="${STUDY_RUNS:-/tmp/psgd-study}"
LOG="$HERE/study.log"
mkdir -p "$STUDY_RUNS"

case_sets() {  # sets CASE_ARGS: the --set arguments of a heterogeneity case
  case "$1" in
    none) CASE_ARGS=() ;;
    straggler) CASE_ARGS=(--set "workers.slowdown={3: 4.0}") ;;
    delay) CASE_ARGS=(--set "workers.delay={dist: exponential, mean: 1.0}") ;;
    many) CASE_ARGS=(--set "cluster.workers=16" --set "task.model_args={channels: 64}") ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}
case_title() {
  case "$1" in
    none) echo "4 workers, no straggler" ;;
    straggler) echo "4 workers, rank 3 slowed 4x" ;;
    delay) echo "4 workers, every rank delayed by an exponential multiple (mean 1) of its compute time each step" ;;
    many) echo "16 light workers (64-channel CNN), no straggler: large staleness" ;;
  esac
}

{
  echo "study started $(date -u +%FT%TZ) on $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); seeds $SEEDS; modes $MODES"
  echo "workloads $WORKLOADS; cases: mnist1d $CASES_mnist1d, charlm $CASES_charlm (many: $MANY_MODES); extra settings: ${EXTRA_SETS:-none}"
} > "$LOG.new"
if [ "${REUSE_LR:-0}" = 1 ] && [ -f "$LOG" ]; then  # a continuation: keep the earlier steps' record
  cat "$LOG.new" >> "$LOG" && rm "$LOG.new"
else
  mv "$LOG.new" "$LOG"
fi

copy_out() {  # copy a bench's report, CSVs and plots into the committed tree
  mkdir -p "$HERE/$2"
  rm -f "$HERE/$2"/*.png
  cp "$STUDY_RUNS/$1"/report.md "$STUDY_RUNS/$1"/*.csv "$STUDY_RUNS/$1"/*.png "$HERE/$2/" 2>/dev/null || true
}

status=0
for w in $WORKLOADS; do
  grid_var="LR_GRID_$w"; grid="${!grid_var:-}"
  extra=()
  [ -n "${EXTRA_SETS:-}" ] && for s in $EXTRA_SETS; do extra+=(--set "$s"); done
  lr_args=()
  if [ -n "$grid" ] && [ "${REUSE_LR:-0}" = 1 ] && [ -f "$STUDY_RUNS/$w-lr/summary.csv" ]; then
    lr_args=(--lr-from "$STUDY_RUNS/$w-lr/summary.csv")  # rates chosen by an earlier run of this script
  elif [ -n "$grid" ]; then
    start=$(date +%s)
    rm -rf "${STUDY_RUNS:?}/$w-lr"
    "$PSGD" bench convergence "$HERE/$w.yaml" --modes "$MODES" --lr-grid "$grid" --seeds "$LR_SEEDS" \
        --out "$STUDY_RUNS/$w-lr" --title "$w, learning-rate grid, no straggler" "${extra[@]}" \
        > "$STUDY_RUNS/$w-lr.out" 2>&1 || status=1
    copy_out "$w-lr" "$w-lr"
    lr_args=(--lr-from "$STUDY_RUNS/$w-lr/summary.csv")
    echo "$w lr grid $grid: $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  fi
  cases_var="CASES_$w"
  for c in ${!cases_var-}; do
    case_sets "$c"
    modes="$MODES"; case_lr=("${lr_args[@]}")
    if [ "$c" = many ]; then
      modes="$MANY_MODES"; case_lr=()
      if [ -n "$grid" ]; then  # 16 workers: a grid of their own
        start=$(date +%s)
        rm -rf "${STUDY_RUNS:?}/$w-many-lr"
        "$PSGD" bench convergence "$HERE/$w.yaml" --modes "$modes" --lr-grid "$grid" --seeds "$LR_SEEDS" \
            --out "$STUDY_RUNS/$w-many-lr" --title "$w, learning-rate grid, $(case_title many)" \
            "${CASE_ARGS[@]}" "${extra[@]}" > "$STUDY_RUNS/$w-many-lr.out" 2>&1 || status=1
        copy_out "$w-many-lr" "$w-many-lr"
        case_lr=(--lr-from "$STUDY_RUNS/$w-many-lr/summary.csv")
        echo "$w many lr grid $grid: $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
      fi
    fi
    start=$(date +%s)
    rm -rf "${STUDY_RUNS:?}/$w-$c"
    "$PSGD" bench convergence "$HERE/$w.yaml" --modes "$modes" --seeds "$SEEDS" "${case_lr[@]}" \
        --out "$STUDY_RUNS/$w-$c" --title "$w, $(case_title "$c")" "${CASE_ARGS[@]}" "${extra[@]}" \
        > "$STUDY_RUNS/$w-$c.out" 2>&1 || status=1
    copy_out "$w-$c" "$w-$c"
    echo "$w-$c: $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
  done
done
"${PYTHON:-python}" "$HERE/verdicts.py" "$HERE" >> "$LOG"
echo "study finished $(date -u +%FT%TZ) (exit status $status)" >> "$LOG"
exit $status
