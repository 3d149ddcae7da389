#!/usr/bin/env bash
# Regenerates the simulated scale study in this directory, in one command:
#   benchmarks/convergence-sim/run_study.sh
# Every run is on the virtual cluster (--on sim): real gradients, simulated time.
# Workload digits.yaml (quickstart MLP on the 8x8 digits, batch 4 per worker,
# 20 ms of compute per step, 25 Gb/s links with 20 us latency). For each W in WORKERS:
#   1. learning rates, case none, LR_SEEDS seed(s): three grids, one per family of
#      modes whose best rates lie apart (w<W>-lr-sync, -async, -adamw); each mode
#      keeps its best rate, as the real study (benchmarks/convergence) chooses them
#   2. each case at the chosen rates, SEEDS seeds (w<W>-<case>/: report.md,
#      summary.csv, seeds.csv): none with every mode a claim needs (NONE_MODES),
#      straggler / delay / pareto with the straggler claims' modes (HET_MODES)
# then report.py writes report.md, verdicts at every W and scale.png.
# Runs go to $STUDY_RUNS; JOBS benches run side by side (one torch thread each);
# study.log records the machine, its load, and each bench's wall and CPU seconds.
# REUSE_LR=1 keeps the rates an earlier run's grids chose ($STUDY_RUNS/w<W>-lr.csv).
# About 40 min of CPU on 2 quiet cores (README.md says what was measured).
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
SEEDS="${SEEDS:-5}"
LR_SEEDS="${LR_SEEDS:-1}"
JOBS="${JOBS:-2}"
WORKERS="${WORKERS:-4 16 64 256}"
CASES="${CASES:-none straggler delay pareto}"
H="${H:-8}"   # local steps of the local-update modes
# The families' grids (optimizer.lr, no lr_scaling): synchronous modes average
# W gradients and take larger steps; the others step per worker; DiLoCo's inner AdamW.
SYNC_MODES="allreduce,bsp,bsp+b%B%"   # %B%: the backup count at that W
ASYNC_MODES="ssp:1,ssp:8,asp,asp+sa,asp+dc,local:$H,geo:$H"
ADAMW_MODES="diloco:$H,adiloco:$H,asp+h$H+diloco"
GRID_sync="${GRID_sync:-0.1,0.3,1,3,10}"
GRID_async="${GRID_async:-0.001,0.003,0.01,0.03,0.1,0.3,1}"
GRID_adamw="${GRID_adamw:-0.0003,0.001,0.003,0.01,0.03}"
NONE_MODES="${NONE_MODES:-allreduce,bsp,ssp:1,ssp:8,asp,asp+sa,asp+dc,local:$H,geo:$H,diloco:$H,adiloco:$H,asp+h$H+diloco}"
HET_MODES="${HET_MODES:-bsp,bsp+b%B%,ssp:1,ssp:8,asp,asp+sa,asp+dc}"
STUDY_RUNS="${STUDY_RUNS:-/tmp/psgd-simstudy}"
LOG="$HERE/study.log"
mkdir -p "$STUDY_RUNS"

backups() { local b=$(( $1 / 16 )); echo $(( b < 1 ? 1 : b )); }   # ~6% backups, as Chen et al. 2016
cap_s() {  # simulated seconds a run may take: about 3x bsp's time to target at that W (pilot)
  case "$1" in 4) echo 10 ;; 16) echo 6 ;; 64) echo 4 ;; *) echo 3 ;; esac
}
case_sets() {  # CASE_ARGS: the --set arguments of a heterogeneity case at W workers
  case "$1" in
    none) CASE_ARGS=() ;;
    straggler) CASE_ARGS=(--set "workers.slowdown={$(( $2 - 1 )): 4.0}") ;;
    delay) CASE_ARGS=(--set "workers.delay={dist: exponential, mean: 1.0}") ;;
    pareto) CASE_ARGS=(--set "workers.delay={dist: pareto, mean: 1.0, shape: 1.5}") ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}
case_title() {
  case "$1" in
    none) echo "no straggler" ;;
    straggler) echo "rank $(( $2 - 1 )) slowed 4x" ;;
    delay) echo "every rank delayed each step by an exponential multiple (mean 1) of its compute time" ;;
    pareto) echo "every rank delayed each step by a Pareto (shape 1.5, mean 1) multiple of its compute time" ;;
  esac
}
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

{
  echo "study started $(date -u +%FT%TZ) on $(nproc) cores; load average: $(loadavg); jobs $JOBS"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); workers $WORKERS; cases $CASES; seeds $SEEDS"
} > "$LOG"

bench() {  # NAME ARGS...: one bench into $STUDY_RUNS/NAME, copied to $HERE/NAME, timed into the log
  local name="$1"; shift
  rm -rf "${STUDY_RUNS:?}/$name"
  local start; start=$(date +%s)
  local st=0
  /usr/bin/time -o "$STUDY_RUNS/$name.time" -f "%e %U %S" \
    "$PSGD" bench convergence "$HERE/digits.yaml" --on sim --out "$STUDY_RUNS/$name" "$@" \
    > "$STUDY_RUNS/$name.out" 2>&1 || st=$?
  mkdir -p "$HERE/$name"
  cp "$STUDY_RUNS/$name"/report.md "$STUDY_RUNS/$name"/*.csv "$HERE/$name/" 2>/dev/null || st=1
  read -r wall user sys < "$STUDY_RUNS/$name.time" || true
  echo "$name: ${wall:-?} s wall, $(echo "${user:-0} + ${sys:-0}" | bc) s CPU, exit $st; load average: $(loadavg)" >> "$LOG"
  return $st
}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || status=1; done; }

status=0
for w in $WORKERS; do
  b=$(backups "$w"); cap=$(cap_s "$w")
  every=$(echo "scale=4; $cap / 100" | bc)   # 100 evaluations over the cap: resolution <= 3% of bsp's time
  common=(--set "cluster.workers=$w" --set "train.max_time_s=$cap" --set "eval.every_s=$every")
  grids=()
  if [ "${REUSE_LR:-0}" = 1 ] && [ -s "$STUDY_RUNS/w$w-lr.csv" ]; then
    echo "w$w: learning rates reused from $STUDY_RUNS/w$w-lr.csv (an earlier run's grids)" >> "$LOG"
  else
  for fam in sync async adamw; do
    modes_var="${fam^^}_MODES"; grid_var="GRID_$fam"
    modes="${!modes_var//%B%/$b}"
    throttle
    bench "w$w-lr-$fam" --modes "$modes" --lr-grid "${!grid_var}" --seeds "$LR_SEEDS" \
      --title "simulated, $w workers, learning-rate grid ($fam modes), no straggler" "${common[@]}" &
    grids+=($!)
  done
  for p in "${grids[@]}"; do wait "$p" || status=1; done
  head -1 "$STUDY_RUNS/w$w-lr-sync/summary.csv" > "$STUDY_RUNS/w$w-lr.csv"
  for fam in sync async adamw; do tail -n +2 "$STUDY_RUNS/w$w-lr-$fam/summary.csv" >> "$STUDY_RUNS/w$w-lr.csv"; done
  fi
  for c in $CASES; do
    case_sets "$c" "$w"
    modes="$HET_MODES"; [ "$c" = none ] && modes="$NONE_MODES"
    modes="${modes//%B%/$b}"
    throttle
    bench "w$w-$c" --modes "$modes" --seeds "$SEEDS" --lr-from "$STUDY_RUNS/w$w-lr.csv" \
      --title "simulated, $w workers, $(case_title "$c" "$w")" "${common[@]}" ${CASE_ARGS[@]+"${CASE_ARGS[@]}"} &
  done
done
wait || status=1
"$PYTHON" "$HERE/report.py" "$HERE" >> "$LOG" || status=1
echo "study finished $(date -u +%FT%TZ) (exit status $status); load average: $(loadavg)" >> "$LOG"
exit $status
