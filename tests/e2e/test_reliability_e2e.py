"""Crash recovery with real processes: a SIGKILLed shard or worker is restarted
by the launcher and the run completes with nothing acknowledged lost; a run
stopped with SIGTERM continues from its checkpoints with `--resume`."""
import json
import os
import signal
import subprocess

import pytest
from conftest import (
    FAST_RETRY,
    final_versions,
    finish,
    pid_of,
    psgd_cmd,
    read_events,
    spawn,
    start_launch,
    wait_for,
    worker_steps,
    write_config,
)

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_sigkill_server_restarts_from_snapshot_and_loses_nothing(tmp_path):
    steps = 300
    cfg = write_config(tmp_path / "c.yaml", cluster=FAST_RETRY,
                       train={"steps_per_worker": steps, "max_time_s": 90, "target_accuracy": 0.93},
                       checkpoint={"every_updates": 100, "every_s": 0},
                       supervision={"max_restarts": 2, "backoff_s": 0.2})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    assert wait_for(lambda: worker_steps(out, 0) >= 130, timeout=60), "training did not get going"
    os.kill(pid_of(out, "server", 0), signal.SIGKILL)
    code, output = finish(proc, 90)
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    events = read_events(out)
    assert summary["restarts"] == 1
    restart = next(e for e in events if e.get("event") == "restart")
    assert (restart["process"], restart["process_index"]) == ("server", 0) and "-9" in restart["cause"]
    resumed = [e for e in events if e.get("event") == "resumed" and e["role"] == "server" and e["index"] == 0]
    assert len(resumed) == 1 and resumed[0]["snapshot_version"] >= 100
    # Every worker finished; `pushes` counts the distinct pushes every shard acknowledged to it
    # (re-registering with the restarted shard kept each worker's own clock: no clock skipped).
    done = {e["rank"]: e for e in events if e.get("event") == "done"}
    assert {r: (e["clock"], e["pushes"]) for r, e in done.items()} == {0: (steps, steps), 1: (steps, steps)}
    acknowledged = sum(e["pushes"] for e in done.values())
    # Applied updates: ASP applies each distinct push once, so a lost or doubled push shows here.
    assert final_versions(events) == {0: acknowledged, 1: acknowledged}
    assert summary["total_updates"] == acknowledged
    assert summary["final_test_accuracy"] >= 0.93


@pytest.mark.timeout(120)
def test_sigkill_worker_is_restarted_and_rejoins_over_curvezmq(tmp_path):
    steps = 150
    keys = spawn(psgd_cmd("keys", "generate", str(tmp_path / "keys")), stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True)
    assert finish(keys, 30)[0] == 0
    # Encrypted and authenticated throughout: the processes find keys/ beside the config.
    cfg = write_config(tmp_path / "c.yaml", cluster=FAST_RETRY,
                       consistency={"mode": "ssp", "staleness": 2},
                       train={"steps_per_worker": steps, "max_time_s": 90},
                       supervision={"max_restarts": 1, "backoff_s": 0.2},
                       security={"curve": True, "keys_dir": "keys"}, eval={"enabled": False})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    assert wait_for(lambda: worker_steps(out, 1) >= 50, timeout=60), "training did not get going"
    old_pid = pid_of(out, "worker", 1)
    servers = [e for e in json.loads((out / "processes.json").read_text()) if e["role"] == "server"]
    assert len(servers) == 2 and all(e["address"].startswith("127.0.0.1:") for e in servers)  # loopback only
    os.kill(old_pid, signal.SIGKILL)
    assert wait_for(lambda: pid_of(out, "worker", 1) != old_pid, timeout=20), "processes.json not rewritten"
    code, output = finish(proc, 90)
    assert code == 0, output
    events = read_events(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["status"] == "ok"
    readies = [e for e in events if e.get("event") == "ready" and e["role"] == "worker" and e["index"] == 1]
    assert len(readies) == 2 and readies[1]["clock"] >= 50  # rejoined where it was, not from zero
    done = {e["rank"]: e["clock"] for e in events if e.get("event") == "done"}
    assert done == {0: steps, 1: steps}
    assert summary["max_clock_gap"] <= 2  # SSP's bound held through the restart


@pytest.mark.timeout(150)
def test_resume_after_sigterm_continues_from_snapshot(tmp_path):
    steps = 200
    cfg = write_config(tmp_path / "c.yaml", cluster=FAST_RETRY,
                       train={"steps_per_worker": steps, "max_time_s": 90},
                       checkpoint={"every_updates": 50, "every_s": 1.0}, eval={"enabled": False})
    out = tmp_path / "run"
    proc = start_launch(cfg, out)
    assert wait_for(lambda: worker_steps(out, 0) >= 60, timeout=60), "training did not get going"
    proc.send_signal(signal.SIGTERM)
    code, output = finish(proc, 60)
    assert code == 128 + signal.SIGTERM, output
    assert f"continue this run with: psgd launch --resume {out}" in output
    first = json.loads((out / "summary.json").read_text())
    assert first["status"] == "interrupted"
    stopped_at = final_versions(read_events(out))
    assert min(stopped_at.values()) > 0
    n_before = len(read_events(out))

    proc = spawn(psgd_cmd("launch", "--resume", str(out), "--quiet"), stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    code, output = finish(proc, 90)
    assert code == 0, output
    after = read_events(out)[n_before:]
    resumed = {e["index"]: e for e in after if e.get("event") == "resumed"}
    # Every shard came back at exactly the version it stopped at (clean stop: nothing to replay).
    assert {i: e["snapshot_version"] for i, e in resumed.items()} == stopped_at
    assert all(e["replayed"] == 0 for e in resumed.values())
    for rank in (0, 1):
        ready = next(e for e in after if e.get("event") == "ready" and e["role"] == "worker" and e["index"] == rank)
        steps_now = sum(1 for e in after if e.get("event") == "step" and e["rank"] == rank)
        assert ready["clock"] > 0 and steps_now == steps - ready["clock"]  # continued, not started over
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["wall_time_s"] > first["wall_time_s"]
    assert min(e["t"] for e in after if e.get("event") == "step") >= first["wall_time_s"]  # the clock continued


@pytest.mark.timeout(90)
def test_launch_fails_with_the_cause_once_restarts_run_out(tmp_path):
    # Curve on but no keys: every server start fails the same way.
    cfg = write_config(tmp_path / "c.yaml", security={"curve": True, "keys_dir": "missing-keys"},
                       cluster={"servers": 1, "workers": 1},
                       supervision={"max_restarts": 1, "backoff_s": 0.1}, eval={"enabled": False})
    out = tmp_path / "run"
    code, output = finish(start_launch(cfg, out), 80)
    assert code == 1
    assert "key file not found" in output and "after 1 restart" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["restarts"] >= 1
