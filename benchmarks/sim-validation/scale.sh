#!/usr/bin/env bash
# bench scale on the virtual cluster against real processes, in one command:
#   benchmarks/sim-validation/scale.sh
# 1. real: psgd bench scale, 1 shard, 1-64 light workers (64 KB gradient, 20 ms compute);
# 2. scale_compare.py: the simulator calibrated from the real 1-worker point predicts
#    every point's updates/s, each judged within ±25% (scale-report.md).
# About 2 minutes.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../.."
PSGD="${PSGD:-psgd}"
PYTHON="${PYTHON:-python3}"
WINDOW_S="${WINDOW_S:-5}"
echo "started $(date -u +%FT%TZ) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)" > "$HERE/scale-run.log"
"$PSGD" bench scale --shards 1 --workers 1,2,4,8,16,32,64 --window-s "$WINDOW_S" --json > "$HERE/real-scale.json"
echo "real done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/scale-run.log"
"$PYTHON" "$HERE/scale_compare.py" "$HERE/real-scale.json" > "$HERE/scale-report.md"
echo "finished $(date -u +%FT%TZ)" >> "$HERE/scale-run.log"
