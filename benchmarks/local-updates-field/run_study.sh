#!/usr/bin/env bash
# Regenerates the local-updates field study in this directory, in one command:
#   benchmarks/local-updates-field/run_study.sh
# Issue #40's comparison: dense DiLoCo, int8/int4 DiLoCo and streaming DiLoCo against
# ASP, BSP and all-reduce, each at its best learning rate from a small grid, several seeds:
#   1. simulated (--on sim), workload sim.yaml: a WAN between workers and shards
#      (1 Gb/s, 10 ms one way), 4 workers, each mode's grid with SEEDS seeds at every point;
#   2. real processes on this machine, configs/quickstart.yaml at 4 workers: each grid with
#      one seed, then REAL_SEEDS seeds at the chosen rate (--lr-from);
#   3. quorum merging (consistency.quorum), where this checkout has it: dense DiLoCo with a
#      quorum of 3 of 4 against without, rank 3 slowed 4x, on the simulator (the quorum slot);
# then report.py writes report.md from the benches' CSVs and the runs' summaries.
# Runs go to $STUDY_RUNS; study.log records the machine, its load and each bench's CPU seconds.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
PYTHON="${PYTHON:-python}"
SEEDS="${SEEDS:-3}"
REAL_SEEDS="${REAL_SEEDS:-3}"
H="${H:-8}"
STUDY_RUNS="${STUDY_RUNS:-/tmp/psgd-fieldstudy}"
PARTS="${PARTS:-sim quorum real}"  # which parts run (a part left out keeps its committed results)
# The modes, by family (each family's rates lie apart: BSP and all-reduce average 4 gradients,
# ASP steps on each, DiLoCo's inner optimizer is AdamW).
SYNC_MODES="${SYNC_MODES:-allreduce,bsp}"
ASYNC_MODES="${ASYNC_MODES:-asp}"
DILOCO_MODES="${DILOCO_MODES:-diloco:$H,diloco:$H+int8,diloco:$H+int4,diloco:$H+f2,diloco:$H+f2+t1+a0.5,adiloco:$H+f2}"
REAL_DILOCO_MODES="${REAL_DILOCO_MODES:-diloco:$H,diloco:$H+int8,diloco:$H+int4,diloco:$H+f2,diloco:$H+f2+t1+a0.5}"
GRID_sync="${GRID_sync:-0.1,0.3,1}"
GRID_async="${GRID_async:-0.03,0.1,0.3}"
GRID_diloco="${GRID_diloco:-0.001,0.003,0.01}"
REAL_GRID_sync="${REAL_GRID_sync:-0.1,0.3}"
REAL_GRID_async="${REAL_GRID_async:-0.1,0.3}"
REAL_GRID_diloco="${REAL_GRID_diloco:-0.003,0.01}"
LOG="$HERE/study.log"
mkdir -p "$STUDY_RUNS"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
{
  echo "study started $(date -u +%FT%TZ) on $(nproc) cores; load average: $(loadavg)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); seeds $SEEDS (sim), $REAL_SEEDS (real); H $H"
} >> "$LOG"  # appended: a partial rerun (PARTS) keeps the earlier parts' lines

bench() {  # NAME CONFIG ARGS...: one bench into $STUDY_RUNS/NAME, its CSVs copied to $HERE/NAME, timed into the log
  local name="$1" config="$2"; shift 2
  rm -rf "${STUDY_RUNS:?}/$name"
  local st=0
  /usr/bin/time -o "$STUDY_RUNS/$name.time" -f "%e %U %S" \
    "$PSGD" bench convergence "$config" --out "$STUDY_RUNS/$name" "$@" > "$STUDY_RUNS/$name.out" 2>&1 || st=$?
  mkdir -p "$HERE/$name"
  cp "$STUDY_RUNS/$name"/report.md "$STUDY_RUNS/$name"/*.csv "$HERE/$name/" 2>/dev/null || st=1
  "$PYTHON" "$HERE/peaks.py" "$STUDY_RUNS/$name/runs" > "$HERE/$name/runs.csv" || st=1
  read -r wall user sys < "$STUDY_RUNS/$name.time" || true
  echo "$name: ${wall:-?} s wall, $(echo "${user:-0} + ${sys:-0}" | bc) s CPU, exit $st; load average: $(loadavg)" >> "$LOG"
  return $st
}

status=0
SIM="$HERE/sim.yaml"
for fam in sync async diloco; do
  [[ " $PARTS " == *" sim "* ]] || break
  modes_var="${fam^^}_MODES"; grid_var="GRID_$fam"
  bench "sim-$fam" "$SIM" --on sim --modes "${!modes_var}" --lr-grid "${!grid_var}" --seeds "$SEEDS" \
    --title "simulated WAN (1 Gb/s, 10 ms), 4 workers: $fam modes" || status=1
done

# The quorum slot: filled where consistency.quorum exists (issue #40's other half).
if [[ " $PARTS " != *" quorum "* ]]; then
  :
elif "$PYTHON" -c "import psgd.config.quorum" 2>/dev/null; then
  straggler=(--set "workers.slowdown={3: 4.0}")
  bench "sim-quorum-straggler" "$SIM" --on sim --modes "diloco:$H" --lr-from "$HERE/sim-diloco/summary.csv" \
    --seeds "$SEEDS" --title "simulated WAN, rank 3 slowed 4x: dense DiLoCo" "${straggler[@]}" || status=1
  bench "sim-quorum-straggler-q3" "$SIM" --on sim --modes "diloco:$H" --lr-from "$HERE/sim-diloco/summary.csv" \
    --seeds "$SEEDS" --title "simulated WAN, rank 3 slowed 4x: DiLoCo with a quorum of 3 (adaptive grace)" \
    "${straggler[@]}" --set consistency.mode=bsp --set "local.steps=$H" --set "consistency.quorum={size: 3, grace_s: auto}" || status=1
else
  echo "quorum slot: psgd.config.quorum is not in this checkout; no quorum rows" >> "$LOG"
fi

REAL="$HERE/quickstart.yaml"
for fam in sync async diloco; do
  [[ " $PARTS " == *" real "* ]] || break
  modes_var="${fam^^}_MODES"; [ "$fam" = diloco ] && modes_var=REAL_DILOCO_MODES
  grid_var="REAL_GRID_$fam"
  bench "real-$fam-grid" "$REAL" --on local --modes "${!modes_var}" --lr-grid "${!grid_var}" --seeds 1 \
    --title "real, this machine, 4 workers: $fam modes, learning-rate grid" || status=1
  bench "real-$fam" "$REAL" --on local --modes "${!modes_var}" --lr-from "$HERE/real-$fam-grid/summary.csv" \
    --seeds "$REAL_SEEDS" --title "real, this machine, 4 workers: $fam modes" || status=1
done

"$PYTHON" "$HERE/report.py" "$HERE" >> "$LOG" || status=1
echo "study finished $(date -u +%FT%TZ) (exit status $status); load average: $(loadavg)" >> "$LOG"
exit $status
