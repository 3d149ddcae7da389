"""A killed worker whose restart would fall due after train.max_time_s is not restarted
(issue 39). Before, the restart was booked and, falling due within the stop grace (10 s
after the limit), started a worker after the limit that the launcher then killed,
ending the run with status time_limit."""
import json
import os
import signal

import pytest
from conftest import finish, pid_of, read_events, start_launch, wait_for, worker_steps, write_config

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(180)
def test_a_worker_killed_near_the_limit_is_not_restarted_after_it(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", cluster={"servers": 1, "workers": 2},
                       train={"steps_per_worker": 1_000_000, "max_time_s": 4, "target_accuracy": None},
                       eval={"every_s": 1.0}, supervision={"max_restarts": 1, "backoff_s": 8.0})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    assert wait_for(lambda: worker_steps(out, 0) >= 5, timeout=30), "training did not get going"
    killed = pid_of(out, "worker", 0)
    os.kill(killed, signal.SIGKILL)
    code, output = finish(proc, 60)  # killed in the first 4 s of training: due 8-12 s in, after the limit
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["restarts"] == 0
    events = read_events(out)
    assert not [e for e in events if e.get("event") == "restart"]
    assert [e["rank"] for e in events if e.get("event") == "done"] == [1]  # the killed worker never said done
