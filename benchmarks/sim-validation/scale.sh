#!/usr/bin/env bash
# bench scale on the virtual cluster against real processes, in one command:
#   benchmarks/sim-validation/scale.sh
# 1. real: psgd bench scale, 1 shard, 1-64 light workers (64 KB gradient, 20 ms compute);
# 2. scale_compare.py: the simulator calibrated from the real 1-worker point and one
#    loaded point (LOADED workers, default 32: the shard's wake cost) predicts every
#    other point's updates/s, each judged within ±25% (scale-report.md).
# About 3 minutes. REUSE_REAL=1 keeps the committed real-scale.json and runs only
# the simulated side (under a minute).
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
WINDOW_S="${WINDOW_S:-5}"
LOADED="${LOADED:-32}"
started="started $(date -u +%FT%TZ) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
if [ "${REUSE_REAL:-0}" = 1 ]; then
  # the real points stay as committed (their run is logged above this line)
  echo "$started: simulated side only (REUSE_REAL=1), real-scale.json as committed" >> "$HERE/scale-run.log"
else
  echo "$started" > "$HERE/scale-run.log"
  "$PSGD" bench scale --shards 1 --workers 1,2,4,8,16,32,64 --window-s "$WINDOW_S" --json > "$HERE/real-scale.json"
  echo "real done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/scale-run.log"
fi
"$PYTHON" "$HERE/scale_compare.py" "$HERE/real-scale.json" "$LOADED" > "$HERE/scale-report.md"
echo "finished $(date -u +%FT%TZ)" >> "$HERE/scale-run.log"
