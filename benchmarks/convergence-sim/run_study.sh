#!/usr/bin/env bash
# Regenerates the simulated scale study in this directory, in one command:
#   benchmarks/convergence-sim/run_study.sh
# Every run is on the virtual cluster (--on sim): real gradients, simulated time
# (the time model of workload.yaml's sim section; no host model). study.py runs the
# benches (rates, caps, cases, the sensitivity sweep; its docstring says how) and
# writes design.json and study.log; report.py then writes report.md and its plots.
# Environment: WORKERS ("4 16 64 256"), SEEDS (5), GRID_SEEDS (2), JOBS (4 benches
# side by side), SWEEP_W (64), SWEEP_SEEDS (3), STUDY_RUNS (/tmp/psgd-simstudy).
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
export PSGD
status=0
"$PYTHON" "$HERE/study.py" || status=1
"$PYTHON" "$HERE/report.py" "$HERE" >> "$HERE/study.log" || status=1
echo "study finished $(date -u +%FT%TZ) (exit status $status); load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/study.log"
exit $status
