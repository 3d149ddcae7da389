"""Elastic workers with real processes (issue 39, acceptance 2): an SSP run with
cluster.workers {min: 2, max: 6} grows to 5 workers through `psgd ctl RUN_DIR workers 5`
while it trains, loses two of them to SIGKILL, and finishes: every push a shard
acknowledged is applied once, SSP's bound held on every answered pull, and the
summary lists each membership change with the clock it happened at."""
import json
import os
import signal

import pytest
from conftest import finish, pid_of, read_events, start_launch, wait_for, worker_clock, write_config

from psgd.orchestrate.elastic import request_workers

pytestmark = pytest.mark.e2e

STALENESS = 2
STEPS = 200


@pytest.mark.timeout(120)
def test_ssp_run_grows_and_loses_workers_and_keeps_its_guarantees(tmp_path):
    # Steps paced by a stated device time (20 ms) so the run lasts a few seconds whatever the load;
    # a killed worker leaves the quorum after cluster.timeout_s of silence.
    cfg = write_config(tmp_path / "c.yaml",
                       cluster={"servers": 2, "workers": {"min": 2, "max": 6}, "timeout_s": 1.0,
                                "heartbeat_s": 0.25, "request_timeout_s": 1.0, "max_retries": 60},
                       consistency={"mode": "ssp", "staleness": STALENESS},
                       train={"steps_per_worker": STEPS, "max_time_s": 60},
                       workers={"device": "cpu", "device_ms": 20}, eval={"enabled": False})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    assert wait_for(lambda: worker_clock(out, 0) >= 20, timeout=60), "training did not get going"
    asked_at = worker_clock(out, 0)
    request_workers(out, 5)  # what `psgd ctl RUN_DIR workers 5` does (its CLI: tests/unit/orchestrate)
    assert wait_for(lambda: all(worker_clock(out, r) >= asked_at + 5 for r in (2, 3, 4)), timeout=30), \
        "the new workers did not train"
    for rank in (1, 3):
        os.kill(pid_of(out, "worker", rank), signal.SIGKILL)
    code, output = finish(proc, 90)
    assert code == 0, output

    summary = json.loads((out / "summary.json").read_text())
    events = read_events(out)
    assert summary["status"] == "ok" and summary["worker_range"] == {"min": 2, "max": 6}
    changes = summary["membership_changes"]
    joined = {c["rank"]: c for c in changes if c["change"] == "joined"}
    left = {c["rank"]: c for c in changes if c["change"] == "left"}
    assert sorted(joined) == [2, 3, 4] and all(c["cause"] == "scaled_up" for c in joined.values())
    assert sorted(left) == [1, 3] and all(c["cause"] == "lost" for c in left.values())
    assert summary["restarts"] == 0  # a lost worker is not restarted while min remain
    # A new rank starts at the current clock (the slowest member's, within the bound of rank 0's),
    # not at 0; a lost one left at the clock its last step reached.
    assert all(c["clock"] >= asked_at - STALENESS for c in joined.values())
    steps = {}
    for e in events:
        if e.get("event") == "step":
            steps.setdefault(e["rank"], []).append(e["clock"])
    assert all(left[r]["clock"] == steps[r][-1] for r in left)
    assert [c["t"] for c in changes] == sorted(c["t"] for c in changes)

    # Exactly once: every push a shard counted was applied once (SSP rejects none here), and the
    # pushes the survivors had acknowledged, plus the lost workers' logged steps (each logged after
    # every shard acknowledged it), are all there; a lost worker's last push may have reached a
    # shard without its step being logged, at most one per lost worker.
    done = {e["rank"]: e for e in events if e.get("event") == "done"}
    assert sorted(done) == [0, 2, 4] and all(e["clock"] == STEPS for e in done.values())
    finals = {e["index"]: e for e in events if e.get("event") == "server_stats" and e.get("final")}
    assert sorted(finals) == [0, 1]
    acked = sum(e["pushes"] for e in done.values()) + sum(len(steps[r]) for r in left)
    for shard in finals.values():
        assert shard["counters"]["pushes"] == shard["version"]
        assert acked <= shard["version"] <= acked + len(left)
        # SSP's bound held on every pull either shard answered, across every join and departure.
        assert shard["live"]["max_gap_over_bound"] <= 0
        assert sorted(shard["quorum"]) == []  # everybody left at the end
    assert summary["max_clock_gap"] <= STALENESS
    assert summary["workers_timed_out"] == 2 * len(left)  # each lost worker timed out on both shards
