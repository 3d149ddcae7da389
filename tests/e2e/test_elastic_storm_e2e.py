"""An elastic resize storm with real processes (issue 48, item 4): grow to 5, shrink to 2,
grow to 5, 0.15 s apart, three rounds. A stopped worker whose process is slow to exit must
not be stopped again nor its rank started a second time: no more worker processes are alive
at any moment than there are ranks, and every push a shard acknowledged is applied once
(acknowledged = applied on every shard)."""
import json
import os
import threading
import time

import pytest
from conftest import finish, read_events, start_launch, wait_for, worker_clock, write_config

from psgd.bench.fault_metrics import account
from psgd.orchestrate.elastic import request_workers

pytestmark = pytest.mark.e2e

SERVERS, MAX = 2, 5
STORM_GAP_S = 0.15


def _live_children(parent: int) -> list[int]:
    """Pids whose parent is `parent`, not exited (zombies excluded)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            out.append(int(name))
    return out


@pytest.mark.timeout(150)
def test_a_resize_storm_keeps_one_process_per_rank_and_every_acknowledged_push(tmp_path):
    cfg = write_config(tmp_path / "c.yaml",
                       cluster={"servers": SERVERS, "workers": {"min": 2, "max": MAX}, "timeout_s": 5.0,
                                "heartbeat_s": 0.5, "request_timeout_s": 2.0, "max_retries": 30},
                       consistency={"mode": "ssp", "staleness": 3},
                       train={"steps_per_worker": 200, "max_time_s": 90},
                       workers={"device": "cpu", "device_ms": 20}, eval={"enabled": False})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    most = [0]
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            most[0] = max(most[0], len(_live_children(proc.pid)))
            time.sleep(0.03)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        assert wait_for(lambda: worker_clock(out, 0) >= 5, timeout=60), "training did not get going"
        sampler.start()
        for _ in range(3):
            for count in (MAX, 2, MAX):
                request_workers(out, count)  # what `psgd ctl RUN_DIR workers N` does
                time.sleep(STORM_GAP_S)
        code, output = finish(proc, 120)
    finally:
        sampling.set()
    sampler.join(timeout=5)
    assert code == 0, output
    assert most[0] <= SERVERS + MAX, f"{most[0]} children alive at once: a rank ran twice"

    events = read_events(out)
    # Each shard acknowledged as applied exactly what it applied, and the seqs the ranks used
    # (each rank's incarnations together) are exactly the pushes it applied: nothing lost or doubled.
    shards = account(events, MAX)
    assert [p for shard in shards for p in shard.problems] == []
    assert len(shards) == SERVERS and all(s.acked == s.applied == s.worker_pushes > 0 for s in shards), shards
    summary = json.loads((out / "summary.json").read_text())
    changes = summary["membership_changes"]
    left = [c for c in changes if c["change"] == "left"]
    assert left and all(c["cause"] == "scaled_down" for c in left)  # each stopped worker left cleanly
    joined = [c for c in changes if c["change"] == "joined"]
    done = [e for e in events if e.get("event") == "done" and e.get("role") == "worker"]
    assert len(done) == 2 + len(joined)  # one done per process the run started: none lost or doubled
