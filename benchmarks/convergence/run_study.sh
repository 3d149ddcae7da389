#!/usr/bin/env bash
# Regenerates the committed convergence study in this directory, in one command:
#   benchmarks/convergence/run_study.sh
# For each workload (mnist1d.yaml, charlm.yaml):
#   1. learning rates: every mode on the no-straggler case over the grid of its
#      inner optimizer with LR_SEEDS seeds; each mode's best rate is kept
#      (<workload>-lr/; DiLoCo's modes, whose inner optimizer is AdamW, over
#      LR_GRID_ADAMW_<workload> in <workload>-adamw-lr/)
#   2. every case (none, straggler, delay) x every mode at its chosen rate x
#      SEEDS seeds (<workload>-<case>/: report.md, summary.csv, seeds.csv, plots)
#   3. mnist1d only, the "many" case for the staleness-aware claim (Zhang et
#      al. 2016 need large staleness): 16 light workers (64-channel CNN) and
#      MANY_MODES, with a learning-rate grid of its own (<workload>-many-lr/),
#      since rates chosen for 4 workers do not carry over to 16
#   4. the local-update group: LOCAL_MODES (local SGD, GEO-SGD, DiLoCo, naive
#      and Delayed-Nesterov asynchronous DiLoCo, with H = 8, and the bsp and asp
#      baselines they are judged against, measured again beside them) with
#      grids of their own (<workload>-local-lr/, <workload>-local-adamw-lr/) on
#      LOCAL_CASES_<workload> (<workload>-local-<case>/)
# then verdicts.md (literature claims judged from the intervals) is computed
# from the cases' seeds.csv files. Run directories go to $STUDY_RUNS; study.log
# records the machine, its load and the time each step took.
#
# A mode's grid is chosen by its inner optimizer: the workload's optimizer
# (LR_GRID_<workload>; in the local group LR_GRID_LOCAL_<workload>, wider, as
# local SGD's best rate lies above bsp's) or, for the +diloco modes, AdamW
# (LR_GRID_ADAMW_<workload>, which falls back to the other grid when empty);
# each mode is compared at the best rate of its own grid.
#
# The full study is 2 workloads x (10 modes x 3 rates x 1 seed + 3 cases x 10
# modes x 3 seeds + the local group's 4 modes x 5 (charlm 4) rates + 3 modes x
# 4 AdamW rates, 1 seed + 3 cases x 7 modes x 3 seeds) + the many case (3
# modes x 3 rates x 1 seed + 3 modes x 3 seeds) = 444 runs of 18 s of
# training, about 21-25 s each with start-up: about 2.8 h. Knobs for a
# smaller one: WORKLOADS, CASES_<workload> and LOCAL_CASES_<workload> (empty:
# skip that part), MODES, MANY_MODES, LOCAL_MODES, SEEDS, LR_GRID_<workload>
# (empty: skip the grids and use the config's rate with optimizer.lr_scaling:
# linear), LR_GRID_LOCAL_<workload>, LR_GRID_ADAMW_<workload>,
# EXTRA_SETS (--set strings for every run), REUSE_LR=1 (keep the rates an
# earlier run chose in $STUDY_RUNS and append to study.log: to add a case
# without redoing the rest), APPEND_LOG=1 (append to study.log: a partial run
# that leaves the other parts' results in place).
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
SEEDS="${SEEDS:-3}"
LR_SEEDS="${LR_SEEDS:-1}"
WORKLOADS="${WORKLOADS:-mnist1d charlm}"
CASES_mnist1d="${CASES_mnist1d-none straggler delay many}"
CASES_charlm="${CASES_charlm-none straggler delay}"
MANY_MODES="${MANY_MODES:-bsp,asp,asp+sa}"
MODES="${MODES:-allreduce,bsp,bsp+b1,ssp:1,ssp:2,ssp:4,ssp:8,asp,asp+sa,asp+dc}"
LR_GRID_mnist1d="${LR_GRID_mnist1d-0.05,0.1,0.2}"
LR_GRID_charlm="${LR_GRID_charlm-0.001,0.003,0.006}"
LR_GRID_ADAMW_mnist1d="${LR_GRID_ADAMW_mnist1d-0.0003,0.001,0.003,0.01}"
LR_GRID_ADAMW_charlm="${LR_GRID_ADAMW_charlm-0.0003,0.001,0.003,0.006}"
# Local SGD's inner steps are not scaled with the workers (bsp's are, x4): its
# best rate lies above bsp's, so the local group's grid reaches higher.
LR_GRID_LOCAL_mnist1d="${LR_GRID_LOCAL_mnist1d-0.05,0.1,0.2,0.4,0.8}"
LR_GRID_LOCAL_charlm="${LR_GRID_LOCAL_charlm-0.0005,0.001,0.003,0.006}"
LOCAL_MODES="${LOCAL_MODES:-bsp,asp,local:8,geo:8,diloco:8,asp+h8+diloco,adiloco:8}"
LOCAL_CASES_mnist1d="${LOCAL_CASES_mnist1d-none straggler delay}"
LOCAL_CASES_charlm="${LOCAL_CASES_charlm-none straggler delay}"
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
  echo "local group: modes $LOCAL_MODES; cases: mnist1d ${LOCAL_CASES_mnist1d:-none}, charlm ${LOCAL_CASES_charlm:-none}"
  echo "grids: mnist1d ${LR_GRID_mnist1d:-none} (local group ${LR_GRID_LOCAL_mnist1d:-none}; AdamW ${LR_GRID_ADAMW_mnist1d:-none}), charlm ${LR_GRID_charlm:-none} (local group ${LR_GRID_LOCAL_charlm:-none}; AdamW ${LR_GRID_ADAMW_charlm:-none})"
} > "$LOG.new"
if { [ "${REUSE_LR:-0}" = 1 ] || [ "${APPEND_LOG:-0}" = 1 ]; } && [ -f "$LOG" ]; then  # keep the earlier record
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
logged() {  # logged LABEL CMD...: run a bench, log its time and the machine's load
  local label="$1" start; shift
  start=$(date +%s)
  "$@" || status=1
  echo "$label: $(( $(date +%s) - start ))s; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$LOG"
}

grids() {  # grids W NAME MODES CASE-ARGS...: sets LR_ARGS, the rates each mode's own grid chose
  local w="$1" name="$2" modes="$3"; shift 3
  local grid_var="LR_GRID${GRID:-}_$w" adamw_var="LR_GRID_ADAMW_$w"
  local grid="${!grid_var:-}" adamw="${!adamw_var:-}" m sgd_modes="" adamw_modes="" out
  LR_ARGS=()
  [ -n "$grid" ] || return 0   # no grid: the config's rate
  [ -n "$adamw" ] || adamw="$grid"
  for m in ${modes//,/ }; do  # DiLoCo's modes step an inner AdamW: a grid of AdamW rates
    case "$m" in *diloco*) adamw_modes="$adamw_modes,$m" ;; *) sgd_modes="$sgd_modes,$m" ;; esac
  done
  out="$STUDY_RUNS/$name-lr-chosen.csv"
  if [ "${REUSE_LR:-0}" != 1 ] || [ ! -f "$out" ]; then
    rm -f "$out"
    for g in sgd adamw; do
      local gm gg dir
      if [ $g = sgd ]; then gm="${sgd_modes#,}"; gg="$grid"; dir="$name-lr"
      else gm="${adamw_modes#,}"; gg="$adamw"; dir="$name-adamw-lr"; fi
      [ -n "$gm" ] || continue
      rm -rf "${STUDY_RUNS:?}/$dir"
      logged "$dir $gg ($gm)" "$PSGD" bench convergence "$HERE/$w.yaml" --modes "$gm" --lr-grid "$gg" \
          --seeds "$LR_SEEDS" --out "$STUDY_RUNS/$dir" --title "$w, learning-rate grid, $TITLE" "$@" "${extra[@]}" \
          > "$STUDY_RUNS/$dir.out" 2>&1
      copy_out "$dir" "$dir"
      if [ -f "$STUDY_RUNS/$dir/summary.csv" ]; then  # one file of chosen rates for --lr-from
        if [ -f "$out" ]; then tail -n +2 "$STUDY_RUNS/$dir/summary.csv" >> "$out"
        else cp "$STUDY_RUNS/$dir/summary.csv" "$out"; fi
      fi
    done
  fi
  LR_ARGS=(--lr-from "$out")
}

cases() {  # cases W PREFIX MODES CASE...: every case x mode at its chosen rate (LR_ARGS) x SEEDS seeds
  local w="$1" prefix="$2" modes="$3" c; shift 3
  for c in "$@"; do
    case_sets "$c"
    rm -rf "${STUDY_RUNS:?}/$prefix-$c"
    logged "$prefix-$c" "$PSGD" bench convergence "$HERE/$w.yaml" --modes "$modes" --seeds "$SEEDS" "${LR_ARGS[@]}" \
        --out "$STUDY_RUNS/$prefix-$c" --title "$w, $(case_title "$c")" "${CASE_ARGS[@]}" "${extra[@]}" \
        > "$STUDY_RUNS/$prefix-$c.out" 2>&1
    copy_out "$prefix-$c" "$prefix-$c"
  done
}

for w in $WORKLOADS; do
  extra=()
  [ -n "${EXTRA_SETS:-}" ] && for s in $EXTRA_SETS; do extra+=(--set "$s"); done
  cases_var="CASES_$w"; main=() many=0
  for c in ${!cases_var-}; do if [ "$c" = many ]; then many=1; else main+=("$c"); fi; done
  if [ ${#main[@]} -gt 0 ]; then
    TITLE="no straggler" grids "$w" "$w" "$MODES"
    cases "$w" "$w" "$MODES" "${main[@]}"
  fi
  if [ $many = 1 ]; then  # 16 workers: a grid of their own
    case_sets many
    TITLE="$(case_title many)" grids "$w" "$w-many" "$MANY_MODES" "${CASE_ARGS[@]}"
    cases "$w" "$w" "$MANY_MODES" many
  fi
  local_var="LOCAL_CASES_$w"
  if [ -n "${!local_var-}" ]; then  # the local-update group, beside its own bsp and asp
    GRID=_LOCAL TITLE="no straggler, local-update group" grids "$w" "$w-local" "$LOCAL_MODES"
    cases "$w" "$w-local" "$LOCAL_MODES" ${!local_var}
  fi
done
"${PYTHON:-python}" "$HERE/verdicts.py" "$HERE" >> "$LOG"
echo "study finished $(date -u +%FT%TZ) (exit status $status)" >> "$LOG"
exit $status
