"""train.max_time_s bounds a run on every path (issue 39, item 8): a worker frozen with
SIGSTOP under synchronous local SGD is killed after the stop grace, the launcher says which
process it was, reaps every child, and exits with the time limit's code and status."""
import json
import os
import signal

import pytest
from conftest import finish, pid_of, start_launch, wait_for, write_config

from psgd.orchestrate.stopping import STOP_WORKERS_GRACE_S, TIME_LIMIT_EXIT_CODE

pytestmark = pytest.mark.e2e

MAX_TIME_S = 5


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # exited, waiting for its (new) parent to reap it
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.timeout(150)
def test_a_frozen_worker_under_synchronous_local_sgd_ends_the_run_at_the_time_limit(tmp_path):
    config = write_config(tmp_path / "config.yaml", cluster={"servers": 1, "workers": 3, "timeout_s": 600},
                          consistency={"mode": "bsp"}, local={"steps": 4},
                          train={"steps_per_worker": 100000, "max_time_s": MAX_TIME_S, "target_accuracy": 0.999})
    run_dir = tmp_path / "run"
    proc = start_launch(config, run_dir)
    frozen = None
    try:
        assert wait_for(lambda: (run_dir / "start.json").exists(), timeout=90)
        frozen = pid_of(run_dir, "worker", 1)
        children = [e["pid"] for e in json.loads((run_dir / "processes.json").read_text())]
        os.kill(frozen, signal.SIGSTOP)
        code, output = finish(proc, timeout=MAX_TIME_S + STOP_WORKERS_GRACE_S + 60)
    finally:
        if frozen is not None and not _gone(frozen):
            os.kill(frozen, signal.SIGKILL)
            os.kill(frozen, signal.SIGCONT)
    assert code == TIME_LIMIT_EXIT_CODE, output
    why = (f"train.max_time_s={MAX_TIME_S} reached: worker 1 (pid {frozen}), frozen (stopped by a signal) "
           f"did not stop within {STOP_WORKERS_GRACE_S:g} s and was killed")
    assert why in output and "Traceback" not in output, output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "time_limit" and summary["failure"] == why
    assert summary["wall_time_s"] >= MAX_TIME_S
    # Every child is gone: the frozen worker, the ones that stopped as asked, the server, the evaluator.
    assert frozen in children and len(children) == 5
    assert [pid for pid in children if not _gone(pid)] == []
