#!/usr/bin/env bash
# Regenerates the committed fault-storm study (issue 39, acceptance 3):
#   benchmarks/faults/run.sh
# The quickstart job (ASP, 4 workers, 2 shards) for 2 minutes of training, fault-free and
# with one process SIGKILLed every 10 s, side by side, SEEDS seeds; first the workers, then
# the shards. The run directories stay in SCRATCH (hundreds of MB); report.md, faults.json
# and the printed table are copied here, one folder per target.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
SEEDS="${SEEDS:-5}"
SCRATCH="${SCRATCH:-/tmp/psgd-fault-study}"
for target in ${TARGETS:-workers shards}; do
  out="$SCRATCH/$target"
  rm -rf "$out"
  mkdir -p "$HERE/$target"
  # The time bound ends every run: far more steps than two minutes allow, no early stop at a target.
  "$PSGD" bench faults configs/quickstart.yaml --target "$target" --kill-every-s 10 --seeds "$SEEDS" \
    --out "$out" --set train.max_time_s=120 --set train.steps_per_worker=1000000 \
    --set train.target_accuracy=null | tee "$HERE/$target/table.txt"
  cp "$out/report.md" "$out/faults.json" "$HERE/$target/"
done
