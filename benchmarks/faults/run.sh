#!/usr/bin/env bash
# Regenerates the committed fault-storm study (issue 39, acceptance 3):
#   benchmarks/faults/run.sh
# The quickstart job (ASP, 4 workers, 2 shards) for 2 minutes of training, fault-free and
# with one process SIGKILLed every 10 s, side by side, SEEDS seeds: the workers; the shards
# with the config's defaults; the shards again with the clients resending after 1 s
# (cluster.request_timeout_s=1.0) instead of the default 30 s. The run directories stay in
# SCRATCH (hundreds of MB); report.md, faults.json and the printed table are copied here,
# one folder per case. workers-sim: the worker storm on the virtual cluster (--on sim, its
# failure model), set beside the committed real one (--against workers/faults.json): run
# after `workers` (shards-sim and shards-retry1s-sim likewise, after their real cases). Its
# step time is 60 ms (4 workers: 67 updates/s, a quarter of the real fault-free runs' median 266/s) so that its ten runs take minutes here: the goodput kept and
# the time lost per kill depend on a restart's length against the kill interval, not on the
# step time (a killed worker's lost step costs 60 ms instead of 15). supervision.backoff_reset_s
# is set past the run's end for the storms committed before the backoff reset existed (their
# k-th restart of a process always waited 0.5 * 2^k s). Issue 48's cases (a quiet machine):
#   SEEDS=5 CASES="shards-detect shards-replicas1" benchmarks/faults/run.sh
#   SEEDS=5 CASES="shards-detect-sim shards-replicas1-sim" benchmarks/faults/run.sh
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
SEEDS="${SEEDS:-5}"
MAX_TIME_S="${MAX_TIME_S:-120}"  # seconds of training per run
SCRATCH="${SCRATCH:-/tmp/psgd-fault-study}"
for case in ${CASES:-workers shards shards-retry1s}; do
  target="${case%%-*}"
  extra=()
  real="${case%-sim}"
  if [ "$real" = shards-retry1s ]; then extra=(--set cluster.request_timeout_s=1.0); fi
  # Issue 48: shards-detect is the default shard storm again, with the workers' reconnection
  # resend; shards-replicas1 adds one backup per shard (cluster.replicas=1).
  if [ "$real" = shards-replicas1 ]; then extra=(--set cluster.replicas=1); fi
  if [ "$real" != "$case" ]; then  # the same storm on the virtual cluster, beside the committed real one
    extra+=(--on sim --against "benchmarks/faults/$real/faults.json" --set sim.compute_ms=60
            --set sim.compute_jitter=0.3)
    case "$real" in  # the committed real storms of these ran before the backoff reset existed
      workers|shards|shards-retry1s) extra+=(--set supervision.backoff_reset_s=1000000.0) ;;
    esac
  fi
  out="$SCRATCH/$case"
  rm -rf "$out"
  mkdir -p "$HERE/$case"
  # The time bound ends every run: far more steps than two minutes allow, no early stop at a target.
  "$PSGD" bench faults configs/quickstart.yaml --target "$target" --kill-every-s 10 --seeds "$SEEDS" \
    --out "$out" --set train.max_time_s="$MAX_TIME_S" --set train.steps_per_worker=1000000 \
    --set train.target_accuracy=null "${extra[@]}" | tee "$HERE/$case/table.txt"
  cp "$out/report.md" "$out/faults.json" "$HERE/$case/"
done
