"""End-to-end consistency with real processes on loopback: a worker SIGKILLed
mid-run under BSP and SSP (the others finish), and a launched SSP run with a
4x straggler that stays within its bound and still learns."""
import json
import signal
import subprocess
import sys

import pytest
from conftest import kill_tree, launch, read_events, spawn, wait_for, write_config

from psgd.runtime.ports import free_ports

pytestmark = pytest.mark.e2e


STEPS = 80


SHARDS = 1  # one shard keeps the process count low; shard-to-shard clock agreement is tested in-process


def events_of(run_dir, name):
    path = run_dir / "events" / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def last_clock(run_dir, name):
    steps = [e["clock"] for e in events_of(run_dir, name) if e["event"] == "step"]
    return steps[-1] if steps else 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode,staleness", [("bsp", 0), ("ssp", 1)])
def test_sigkilled_worker_is_dropped_and_the_others_finish(tmp_path, mode, staleness):
    ports = free_ports("127.0.0.1", SHARDS)
    config = write_config(
        tmp_path / "config.yaml",
        cluster={"servers": [f"127.0.0.1:{p}" for p in ports], "workers": 3, "timeout_s": 1.5,
                 "heartbeat_s": 0.3, "request_timeout_s": 10.0},
        consistency={"mode": mode, "staleness": staleness},
        train={"steps_per_worker": STEPS, "max_time_s": 60},
        # The victim is slow, so every worker is held at its pace until it dies.
        workers={"device": "cpu", "slowdown": {2: 40.0}},
    )
    run = tmp_path / "run"
    common = [str(config), "--run-dir", str(run)]
    servers = [spawn([sys.executable, "-m", "psgd.cli", "server", *common, "--shard", str(i)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(SHARDS)]
    workers = [spawn([sys.executable, "-m", "psgd.cli", "worker", *common, "--rank", str(r)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for r in range(3)]
    try:
        assert wait_for(lambda: last_clock(run, "worker-2") >= 5, timeout=45), "the run never got going"
        killed_at = last_clock(run, "worker-2")
        workers[2].send_signal(signal.SIGKILL)
        workers[2].wait(timeout=5)
        assert last_clock(run, "worker-0") < STEPS  # killed mid-run
        for r in (0, 1):
            assert workers[r].wait(timeout=40) == 0, workers[r].stderr.read().decode()
            done = [e for e in events_of(run, f"worker-{r}") if e["event"] == "done"]
            assert done and done[0]["clock"] == STEPS
        for s in servers:
            s.send_signal(signal.SIGTERM)
        for s in servers:
            assert s.wait(timeout=20) == 0, s.stderr.read().decode()
    finally:
        for p in servers + workers:
            kill_tree(p)
    for i in range(SHARDS):
        ev = events_of(run, f"server-{i}")
        timed_out = [e for e in ev if e["event"] == "worker_timed_out"]
        assert [e["rank"] for e in timed_out] == [2]
        assert timed_out[0]["clock"] >= killed_at
        final = [e for e in ev if e["event"] == "server_stats" and e["final"]][-1]
        assert final["counters"]["workers_timed_out"] == 1
        assert final["quorum"] == []            # 0 and 1 left at the end, 2 timed out
        if mode == "bsp":
            assert final["version"] == STEPS     # one averaged update per clock, none lost
        else:
            assert max(int(k) for k in final["clock_gap_hist"]) <= staleness
            # Every push is applied on arrival: the survivors' and the victim's logged
            # ones, plus at most one the victim had in flight when it was killed.
            victim_pushes = len([e for e in events_of(run, "worker-2") if e["event"] == "step"])
            assert 2 * STEPS + victim_pushes <= final["version"] <= 2 * STEPS + victim_pushes + 1


@pytest.mark.timeout(90)
def test_launched_ssp_run_with_a_straggler_keeps_its_bound_and_learns(tmp_path):
    config = write_config(
        tmp_path / "config.yaml",
        cluster={"servers": 2, "workers": 3, "timeout_s": 5.0, "heartbeat_s": 0.5},
        consistency={"mode": "ssp", "staleness": 2},
        train={"steps_per_worker": 60, "max_time_s": 60, "target_accuracy": 0.8},
        workers={"device": "cpu", "slowdown": {2: 4.0}},
    )
    out = tmp_path / "run"
    code, output, summary = launch(config, out)
    assert code == 0, output
    assert summary["mode"] == "ssp" and summary["staleness"] == 2
    assert summary["max_clock_gap"] <= 2
    assert summary["staleness_max"] > 0 and summary["staleness_mean"] > 0
    assert summary["rejected_updates"] == 0
    assert summary["final_test_accuracy"] >= 0.8, summary
    assert summary["time_to_target_s"] is not None
    events = read_events(out)
    stats = [e for e in events if e["event"] == "server_stats"]
    assert stats and all(max(map(int, e["clock_gap_hist"]), default=0) <= 2 for e in stats)
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 3 * 60 and max(e["gap"] for e in steps) <= 2
    # The summary's staleness figures are the merged final histograms of both shards.
    finals = [e for e in stats if e["final"]]
    assert len(finals) == 2
    merged = {}
    for e in finals:
        for k, v in e["staleness_hist"].items():
            merged[k] = merged.get(k, 0) + v
    assert summary["staleness_hist"] == dict(sorted(merged.items(), key=lambda kv: int(kv[0])))
    assert summary["staleness_max"] == max(map(int, merged))
