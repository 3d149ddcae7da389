#!/usr/bin/env bash
# psgd's GPU path, checked on a GPU in minutes (benchmarks/gpu/README.md says how a session runs it).
#
#   bash benchmarks/gpu/run.sh [--dry] [--out DIR]
#
# On the lent machine: installs psgd and the dependencies its image lacks from the wheels
# prepare.sh put in benchmarks/gpu/wheels (--no-index, --no-deps: its CUDA torch stays), then
# runs each check under its own timeout, all within 8 minutes: psgd doctor on cuda; the
# quickstart on cuda and BSP+SGD against NCCL all-reduce; bench comm's pinned path and bench
# overlap; the MNIST-1D CNN, ASP and BSP, calibrated for the simulator; the simulator's batched
# path on cuda against the CPU; the push codecs on cuda tensors against the CPU, and the
# quickstart with int8 pushes and replies; 256 simulated MNIST-1D workers with their gradients on
# cuda (sim.gradient_device) against 16 on the CPU. Everything lands in one folder ($OUT, else benchmarks/gpu/out):
# a JSON per check, checks.json, report.md and runs.tar.gz. Exits non-zero naming the first
# check that failed.
#
# --dry (CI, any machine): the same checks with the CUDA parts skipped and said so, the rest on
# the CPU at tiny sizes, with the psgd installed here (PSGD_PYTHON, else .venv/bin/python,
# else python3), every Python command forked from one that has imported torch and psgd.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
DRY=0
OUT_DIR=${OUT:-$ROOT/benchmarks/gpu/out}
while [ $# -gt 0 ]; do
  case "$1" in
    --dry) DRY=1 ;;
    --out) OUT_DIR=${2:?--out needs a folder}; shift ;;
    *) echo "run.sh: unknown argument $1 (use --dry, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psgd-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STEPS=$WORK/steps.jsonl
: >"$STEPS"
FIRST_FAILED=""
STARTED=$(date +%s.%N)

# The limits are the device's, where they add up to 8 minutes; a dry run on a shared CPU
# machine gets twice as long (its checks are smaller, its cores busier).
LIMIT_SCALE=1
if [ "$DRY" = 1 ]; then
  DEVICE=cpu
  LIMIT_SCALE=2
  if [ -n "${PSGD_PYTHON:-}" ]; then PY=$PSGD_PYTHON
  elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
  else PY=python3; fi
else
  DEVICE=cuda
  PY=${PSGD_PYTHON:-python3}
fi
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac  # it runs from $WORK
export PYTHONUNBUFFERED=1
export PSGD_CACHE_DIR=${PSGD_CACHE_DIR:-$WORK/cache}  # MNIST-1D's generated signals: the caller's cache, else this run's own

elapsed() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

record() {  # record NAME STATUS SECONDS RC LIMIT_S
  printf '{"name": "%s", "status": "%s", "seconds": %s, "rc": %s, "limit_s": %s}\n' "$1" "$2" "$3" "$4" "$5" \
    >>"$STEPS"
  if [ "$2" = failed ] && [ -z "$FIRST_FAILED" ]; then FIRST_FAILED=$1; fi
}

check() {  # check NAME LIMIT_S COMMAND...: the command under its own timeout, its output in the log
  local name=$1 limit=$(($2 * LIMIT_SCALE)) t0 rc status
  shift 2
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >>"$WORK/logs/run-$name.log" 2>&1
  rc=$?
  status=ok
  if [ $rc -ne 0 ]; then status=failed; fi
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "$name: timed out after $limit s" >>"$WORK/logs/run-$name.log"; fi
  record "$name" "$status" "$(elapsed "$t0")" "$rc" "$limit"
  printf '%-11s %-6s %6ss  %s\n' "$name" "$status" "$(elapsed "$t0")" "$(tail -n 1 "$WORK/logs/run-$name.log")"
}

mkdir -p "$WORK/logs"
# Everything runs from the work folder: from the repository root, `python -m psgd...` and
# `python -c` would import the psgd/ source folder ahead of the installed package, which
# maps servers/ and workers/ into it.
cd "$WORK"
echo "psgd GPU check: $([ $DRY = 1 ] && echo 'dry run on cpu' || echo 'cuda'), output in $OUT_DIR"

# 1. psgd and the dependencies the device's image lacks, from the carried wheels.
if [ "$DRY" = 1 ]; then
  record install skipped 0 0 0
else
  install_wheels() {  # run by timeout in a bash of its own: it is exported below
    local wheels=$ROOT/benchmarks/gpu/wheels
    [ -f "$wheels/SOURCE" ] || { echo "no wheels: run benchmarks/gpu/prepare.sh here first, carry $wheels"; return 1; }
    [ "$(cat "$wheels/SOURCE")" = "$("$PY" "$ROOT/benchmarks/gpu/checks.py" source-hash)" ] \
      || { echo "the psgd wheel was built from other sources: run benchmarks/gpu/prepare.sh again"; return 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$WORK/site" "$wheels"/*.whl || return 1
    PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH} "$PY" -c \
      "import psgd, zmq, msgpack, crc32c, cloudpickle, mnist1d, torch; print('psgd from', psgd.__file__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  }
  export -f install_wheels
  export PY WORK ROOT
  check install 30 bash -c install_wheels
  export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi

# 2.-6. The checks (benchmarks/gpu/checks.py says what each runs and judges). The limits add
# up to 8 minutes with the install's 30 s and the report's 10 s (30 + 440 + 10 = 480): each at
# least 1.3 times what the check took on the first H200 run (results/report.md); sim-batched's,
# codecs' and sim-scale's are estimates (none has run on a device yet).
C=("$PY" "$ROOT/benchmarks/gpu/checks.py")
if [ "$DRY" = 1 ]; then
  # The dry run's checks, and the psgd commands they run, fork from one interpreter that has
  # imported torch and psgd (preloaded.py): each fresh one would spend seconds of CPU on that.
  # The device run starts each afresh, as above.
  PRE=("$PY" "$ROOT/benchmarks/gpu/preloaded.py")
  export PSGD_GPU_PRELOADED=psgd-gpu-dry-$$-$RANDOM
  "${PRE[@]}" serve "$PSGD_GPU_PRELOADED" >>"$WORK/logs/preloaded.log" 2>&1 &
  PRELOADED_PID=$!
  trap 'kill "$PRELOADED_PID" 2>/dev/null; wait "$PRELOADED_PID"; rm -rf "$WORK"' EXIT
  if "${PRE[@]}" wait "$PSGD_GPU_PRELOADED" "$PRELOADED_PID" >>"$WORK/logs/preloaded.log" 2>&1; then
    C=("${PRE[@]}" run "$PSGD_GPU_PRELOADED" "$ROOT/benchmarks/gpu/checks.py")
  else
    unset PSGD_GPU_PRELOADED
    echo "no preloaded interpreter (logs/preloaded.log in runs.tar.gz): each check starts its own"
  fi
fi
A=(--device "$DEVICE" --out "$OUT_DIR" --work "$WORK")
for spec in doctor:45 quickstart:60 comm:55 overlap:50 mnist1d:90 sim-batched:45 codecs:45 sim-scale:50; do
  if [ "$FIRST_FAILED" = install ]; then  # nothing to run them with: spend no more device time
    record "${spec%%:*}" skipped 0 0 0
  else
    check "${spec%%:*}" "${spec##*:}" "${C[@]}" "${spec%%:*}" "${A[@]}"
  fi
done

REPORT=(--out "$OUT_DIR" --work "$WORK" --steps "$STEPS" --seconds "$(elapsed "$STARTED")")
[ "$DRY" = 1 ] && REPORT+=(--dry)
if ! timeout -k 5 $((10 * LIMIT_SCALE)) "${C[@]}" report "${REPORT[@]}"; then
  [ -z "$FIRST_FAILED" ] && FIRST_FAILED=report
fi
echo "took $(elapsed "$STARTED") s; report: $OUT_DIR/report.md"
if [ -n "$FIRST_FAILED" ]; then
  echo "FAILED: $FIRST_FAILED (its log: runs.tar.gz logs/run-$FIRST_FAILED.log)" >&2
  exit 1
fi
echo "all checks passed"
