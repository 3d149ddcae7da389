"""Replicated shards (cluster.replicas: 1) under a real launch: the primary of shard 0
is SIGKILLed while four workers push; its backup takes the address over and the run
ends ok. The shard's final parameters are exactly those of a fresh shard that applies
the pushes in the order the shard applied them (its push logs across the promotion),
each (rank, seq) once; every shard acknowledged exactly what it applied; and the
launcher's restart of the dead process came back as the new backup."""
import json
import os
import signal
import threading
import time

import pytest
import torch
from conftest import FAST_RETRY, finish, read_events, start_launch, wait_for, worker_steps, write_config

from psgd.bench.fault_metrics import account
from psgd.config import load_config
from psgd.runtime.lifeline import primary_file
from psgd.servers.checkpoint import apply_record, read_log
from psgd.servers.serve import initial_shard_params
from psgd.servers.snapshot_file import read_snapshot
from psgd.servers.state import ShardState

WORKERS = 4


def keep_logs(ckdir, keep, stop):
    """Hard-link each of shard 0's logs as it appears: the shard drops old logs after
    its snapshots, the links keep every record the shard appended."""
    while not stop.is_set():
        for log in ckdir.glob("shard-0.log.*"):
            target = keep / log.name
            if not target.exists():
                try:
                    os.link(log, target)
                except FileNotFoundError:
                    pass
        time.sleep(0.01)


@pytest.mark.timeout(150)
def test_a_killed_primary_hands_its_shard_to_the_backup_with_nothing_lost_or_doubled(tmp_path):
    config = write_config(tmp_path / "c.yaml",
                          cluster={**FAST_RETRY, "servers": 2, "workers": WORKERS, "replicas": 1},
                          train={"steps_per_worker": 150, "max_time_s": 90, "target_accuracy": 0.99,
                                 "stop_at_target": False},
                          checkpoint={"every_updates": 0, "every_s": 0}, eval={"enabled": False})
    out = tmp_path / "run"
    keep = tmp_path / "kept"
    keep.mkdir()
    stop = threading.Event()
    linker = threading.Thread(target=keep_logs, args=(out / "checkpoints", keep, stop), daemon=True)
    proc = start_launch(config, out)
    try:
        linker.start()
        assert wait_for(lambda: primary_file(out, 0).exists() and worker_steps(out, 0) >= 30, timeout=90)
        primary = int(primary_file(out, 0).read_text())
        os.kill(primary, signal.SIGKILL)  # mid-push: four workers push continuously
        code, output = finish(proc, timeout=120)
    finally:
        stop.set()
    assert code == 0, output
    events = read_events(out)
    promoted = [e for e in events if e["event"] == "promoted"]
    assert [e["index"] for e in promoted] == [0]
    assert int(primary_file(out, 0).read_text()) != primary
    restarts = [e for e in events if e["event"] == "restart"]
    assert [(e["process"], e["process_index"] % 2) for e in restarts] == [("server", 0)]
    standbys = [e for e in events if e["event"] == "ready" and e.get("standby") and e["index"] == 0]
    assert len(standbys) == 2  # the backup at the start, and the dead primary's restart
    for acc in account(events, WORKERS):
        assert acc.holds, acc.problems

    cfg = load_config(out / "config.yaml")
    params, _, _ = initial_shard_params(cfg, 0, out)
    fresh = ShardState(cfg, 0, params)
    seen = set()
    for log in sorted(keep.glob("shard-0.log.*"), key=lambda p: int(p.name.rsplit(".", 1)[1])):
        for rec in read_log(log):
            if rec.op.startswith("push"):
                assert (rec.rank, rec.seq) not in seen, f"push {(rec.rank, rec.seq)} applied twice"
                seen.add((rec.rank, rec.seq))
            apply_record(fresh, rec, 0.0)
    final = read_snapshot(out / "checkpoints" / "shard-0.pt")  # the clean stop's snapshot
    assert fresh.version == final["version"] == len(seen) > promoted[0]["version"]
    torch.testing.assert_close(fresh.params, final["params"], rtol=0, atol=0)
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
