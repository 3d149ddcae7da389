"""A frozen process of any role is found by its missing heartbeat (issue 48, item 4): a shard,
the evaluator or a worker under local SGD stopped with SIGSTOP stops touching its heartbeat
file; after cluster.timeout_s of silence the launcher kills it and ends the run with the
time limit's code, naming it, long before train.max_time_s (not rc 0 "ok" with no model.pt,
nor a run kept alive until max_time_s + the stop grace)."""
import json
import os
import signal
import time

import pytest
from conftest import finish, pid_of, start_launch, wait_for, worker_clock, write_config

from psgd.orchestrate.stopping import TIME_LIMIT_EXIT_CODE

pytestmark = pytest.mark.e2e

TIMEOUT_S = 2.0
MAX_TIME_S = 40


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("role", ["server", "evaluator", "worker"])
def test_a_frozen_process_of_any_role_is_killed_and_named_after_its_heartbeat_stops(tmp_path, role):
    config = write_config(tmp_path / "config.yaml",
                          cluster={"servers": 2, "workers": 2, "timeout_s": TIMEOUT_S, "heartbeat_s": 0.25,
                                   "request_timeout_s": 1.0, "max_retries": 4},
                          consistency={"mode": "bsp"}, local={"steps": 4},
                          train={"steps_per_worker": 100000, "max_time_s": MAX_TIME_S, "target_accuracy": 0.999},
                          workers={"device": "cpu", "device_ms": 20}, eval={"every_s": 0.5})
    run_dir = tmp_path / "run"
    proc = start_launch(config, run_dir)
    frozen = None
    try:
        assert wait_for(lambda: worker_clock(run_dir, 0) >= 2, timeout=90), "training did not get going"
        frozen = pid_of(run_dir, role, 1 if role == "worker" else 0)
        os.kill(frozen, signal.SIGSTOP)
        frozen_at = time.monotonic()
        code, output = finish(proc, timeout=MAX_TIME_S + 60)
        took = time.monotonic() - frozen_at
    finally:
        if frozen is not None and not _gone(frozen):
            os.kill(frozen, signal.SIGKILL)
            os.kill(frozen, signal.SIGCONT)
    assert code == TIME_LIMIT_EXIT_CODE, output
    name = f"{role} {1 if role == 'worker' else 0} (pid {frozen}), frozen (stopped by a signal) sent no heartbeat for"
    assert name in output and f"(cluster.timeout_s={TIMEOUT_S:g}): it was killed" in output, output
    assert "Traceback" not in output, output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "time_limit" and name in summary["failure"]
    assert summary["wall_time_s"] < MAX_TIME_S and took < MAX_TIME_S  # found by its silence, not the time limit
    assert _gone(frozen)
