"""Failures that end a run say so in one line, without a traceback or temp
files: a read-only --out, a disk that fills mid-run, a snapshot that cannot be
loaded (not restarted: it would fail the same way). Also `psgd keys generate`
never replaces keys silently, and a launcher killed with -9 then resumed counts
every worker step.

The filesystem cases mount a small tmpfs (read-only, or 3 MB), which needs
root; they are skipped where mounting is not allowed."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from conftest import kill_tree, one_clear_line, psgd_cmd, spawn, tmpfs, wait_for, write_config

pytestmark = pytest.mark.e2e


def launch(cfg, out, *extra, timeout=120):
    proc = spawn(psgd_cmd("launch", str(cfg), "--out", str(out), "--quiet", *extra), stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True, cwd=str(cfg.parent))
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return proc.returncode, output


def temp_files(root):
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.timeout(60)
def test_read_only_out_is_one_line_naming_the_path(tmp_path):
    cfg = write_config(tmp_path / "c.yaml")
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        code, output = launch(cfg, ro / "run")
        line = one_clear_line(output)
        assert code == 1
        assert str(ro / "run") in line and "Read-only file system" in line


@pytest.mark.timeout(150)
def test_disk_full_mid_run_is_one_line_with_a_summary_and_no_temp_files(tmp_path):
    # No snapshots by count or time: the push logs grow until the 3 MB disk is full.
    cfg = write_config(tmp_path / "c.yaml", train={"steps_per_worker": 3000, "max_time_s": 100},
                       checkpoint={"every_updates": 0, "every_s": 0}, eval={"enabled": False},
                       supervision={"max_restarts": 2, "backoff_s": 0.1})
    with tmpfs(tmp_path / "small", "3m") as disk:
        out = disk / "run"
        code, output = launch(cfg, out)
        line = one_clear_line(output)
        assert code == 1
        assert "No space left on device" in line and str(out) in line and "start-up" not in line, line
        assert temp_files(out) == []
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == "failed" and "No space left on device" in summary["failure"]


@pytest.mark.timeout(150)
def test_unloadable_snapshot_is_not_restarted(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", train={"steps_per_worker": 40, "max_time_s": 60},
                       eval={"enabled": False}, supervision={"max_restarts": 3, "backoff_s": 0.1})
    out = tmp_path / "run"
    code, output = launch(cfg, out)
    assert code == 0, output
    for name in ("shard-0.pt", "shard-0.prev.pt"):
        path = out / "checkpoints" / name
        path.write_bytes(path.read_bytes()[:100])
    proc = spawn(psgd_cmd("launch", "--resume", str(out), "--quiet"), stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    output, _ = proc.communicate(timeout=90)
    line = one_clear_line(output)
    assert proc.returncode == 1
    assert str(out / "checkpoints" / "shard-0.pt") in line and "(after" not in line, line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["restarts"] == 0


def step_lines(run_dir) -> int:
    return sum(ln.count('"event": "step"') for p in (run_dir / "events").glob("worker-*.jsonl")
               for ln in p.read_text().splitlines())


@pytest.mark.timeout(180)
def test_summary_counts_every_worker_step_after_kill_and_resume(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", train={"steps_per_worker": 150, "max_time_s": 90},
                       checkpoint={"every_updates": 50, "every_s": 1.0}, eval={"enabled": False},
                       cluster={"request_timeout_s": 1.0, "max_retries": 30, "timeout_s": 5.0, "heartbeat_s": 0.5})
    out = tmp_path / "run"
    proc = spawn(psgd_cmd("launch", str(cfg), "--out", str(out), "--quiet"), stdout=subprocess.DEVNULL,
                 stderr=subprocess.STDOUT, cwd=str(tmp_path))
    try:
        assert wait_for(lambda: (out / "events" / "worker-0.jsonl").exists() and step_lines(out) >= 60, timeout=90)
        pids = [e["pid"] for e in json.loads((out / "processes.json").read_text())]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_for(lambda: not any(os.path.exists(f"/proc/{p}") and
                                        open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
                                        for p in pids), timeout=10)
    finally:
        kill_tree(proc)
    resumed = spawn(psgd_cmd("launch", "--resume", str(out), "--quiet"), stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["worker_steps"] == step_lines(out)
    # Each of the 2 workers may lose the event of the one step it was pushing when its launcher was
    # killed (the push was applied, the process died before writing the line); no other step goes missing.
    assert summary["worker_steps"] >= 2 * 150 - 2
