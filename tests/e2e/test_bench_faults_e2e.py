"""`psgd bench faults` on real launches: a 12 s ASP run with a worker SIGKILLed at 3 s and
another at 6 s, beside the same run fault-free. The kills happen (the launcher restarts
exactly those pids), both runs finish, acked = applied on every shard, and every figure
of the report is the run's own."""
import json

import pytest
from conftest import read_events, run_psgd, write_config

from psgd.core.fault_plan import RESTART_MARGIN_S

pytestmark = pytest.mark.e2e


def final_stats(events):
    latest = {}
    for e in events:
        if e.get("event") == "server_stats":
            latest[e["index"]] = e
    return latest


KILL_EVERY_S = 3
# Two kills: the second leaves its restart RESTART_MARGIN_S before the end, a third would not.
MAX_TIME_S = 2 * KILL_EVERY_S + RESTART_MARGIN_S + 1


@pytest.mark.timeout(240)
def test_two_worker_kills_in_a_12s_run_are_survived_and_measured(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", cluster={"servers": 2, "workers": 2, "timeout_s": 5.0, "heartbeat_s": 0.5,
                                                     "request_timeout_s": 1.0, "max_retries": 60},
                       train={"steps_per_worker": 1_000_000, "max_time_s": MAX_TIME_S, "target_accuracy": None},
                       eval={"every_s": 1.0}, supervision={"max_restarts": 0, "backoff_s": 0.2},
                       workers={"device_ms": 20})  # steps wait as on a device: the runs leave the cores to other tests
    out = tmp_path / "bench"
    code, stdout, stderr = run_psgd("bench", "faults", str(cfg), "--kill-every-s", str(KILL_EVERY_S), "--seeds", "1",
                                    "--out", str(out), "--json", cwd=tmp_path, timeout=220)
    assert code == 0, stderr
    result = json.loads(stdout)
    assert json.loads((out / "faults.json").read_text()) == result
    assert result["bench_overrides"] == ["cluster.launcher=local", "supervision.max_restarts=1"]
    runs = {r["label"]: r for r in result["runs"]}
    assert set(runs) == {"fault-free", "faults"}
    for label, r in runs.items():
        run_dir = out / "runs" / f"{label}-seed0"
        summary = json.loads((run_dir / "summary.json").read_text())
        events = read_events(run_dir)
        assert r["code"] == 0 and summary["status"] == "ok", r["reason"]
        # The time bound ended the run, not the steps.
        assert all(e["steps"] < 1_000_000 for e in events if e.get("event") == "done")
        stats = final_stats(events)
        assert sorted(stats) == [0, 1]
        # Acked = applied on every shard: the shard acknowledged as applied exactly what it applied, and the
        # workers' own counts account for every applied update (a push cut off by the stop: at most one each).
        pushes = sum(e["seqs"] for e in events if e.get("event") == "done" and e["role"] == "worker")
        for s in stats.values():
            assert s["counters"]["push_applied"] == s["version"]
            unread = s["version"] + s["counters"].get("partial_pushes", 0) - pushes
            assert 0 <= unread <= 2
        assert all(not a["problems"] for a in r["accounting"])
        assert [a["applied"] for a in r["accounting"]] == [stats[0]["version"], stats[1]["version"]]
        # Goodput is the run's own: the updates every shard applied over its training time.
        useful = min(s["version"] for s in stats.values())
        assert r["useful_updates"] == useful and r["wall_time_s"] == summary["wall_time_s"]
        assert r["goodput_per_s"] == useful / summary["wall_time_s"]
        assert r["final_test_accuracy"] == summary["final_test_accuracy"]
        restarts = [e for e in events if e.get("event") == "restart"]
        if label == "fault-free":
            assert r["kills"] == [] and restarts == [] and summary["restarts"] == 0
            continue
        # The kills happened: workers 0 and 1, at 3 s and 6 s of training, and the launcher restarted those pids.
        assert [(k["role"], k["index"]) for k in r["kills"]] == [("worker", 0), ("worker", 1)]
        assert [round(k["t"]) for k in r["kills"]] == [KILL_EVERY_S, 2 * KILL_EVERY_S]
        assert summary["restarts"] == 2
        assert [(e["process"], e["process_index"]) for e in restarts] == [("worker", 0), ("worker", 1)]
        for k, e in zip(r["kills"], restarts):
            assert f"(pid {k['pid']}) exited with code -9" in e["cause"]
        # Time lost per kill: from the kill to the last shard's registration of the new incarnation.
        for rec in r["recoveries"]:
            firsts = [min(e["t"] for e in events if e.get("event") == "register" and e["index"] == shard
                          and e["rank"] == rec["index"] and e["t"] > rec["kill_t"]) for shard in (0, 1)]
            assert rec["rejoined_at"] == max(firsts) and rec["lost_s"] == max(firsts) - rec["kill_t"] > 0
    analysis = result["analysis"]
    assert analysis["goodput_ratios"] == [runs["faults"]["goodput_per_s"] / runs["fault-free"]["goodput_per_s"]]
    assert analysis["kills"] == 2 and analysis["never_rejoined"] == 0 and analysis["accounting_problems"] == []
    assert analysis["verdict"] == "inconclusive"  # one seed decides nothing
    report = (out / "report.md").read_text()
    assert f"{runs['faults']['useful_updates']}" in report and f"{runs['fault-free']['useful_updates']}" in report
