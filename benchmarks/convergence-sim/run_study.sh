#!/usr/bin/env bash
# Regenerates the simulated scale study in this directory, in one command:
#   benchmarks/convergence-sim/run_study.sh
# Every run is on the virtual cluster (--on sim): real gradients, simulated time
# (the per-link time model of workload.yaml's sim section; no sim.hosts). study.py runs
# the benches (rates, caps, cases, the sensitivity sweep; its docstring says how) and
# writes design.json and study.log; report.py then writes report.md (with the cases'
# plots) and the README's results. Run it under `nice -n 19` on a shared machine.
# Environment: WORKERS ("4 16 64 256"; a subset keeps the other W's results), SEEDS (5),
# GRID_SEEDS (2), JOBS (2 benches side by side), SWEEP_W (64), SWEEP_SEEDS (3),
# STUDY_BUDGET_S (4500: what is not done by then is not run, and report.md lists it),
# ORDER (sweep-first), STUDY_RUNS (/tmp/psgd-simstudy).
. "$(dirname "$0")/../study_env.sh"  # strict mode, HERE, the repository root, PSGD, PYTHON
export PSGD
status=0
"$PYTHON" "$HERE/study.py" || status=1
"$PYTHON" "$HERE/report.py" "$HERE" >> "$HERE/study.log" || status=1
echo "study finished $(date -u +%FT%TZ) (exit status $status); load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/study.log"
exit $status
