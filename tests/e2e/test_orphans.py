"""`kill -9` of the launcher: every process it started is gone within 5 s, in
every role, and processes.json does not stay behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import kill_tree, psgd_cmd, spawn, wait_for, write_config

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def started(run_dir) -> bool:
    return (run_dir / "start.json").exists() and (run_dir / "processes.json").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["ssp", "allreduce"])
def test_children_die_with_a_killed_launcher(tmp_path, mode):
    cfg = write_config(tmp_path / "c.yaml", consistency={"mode": mode, "staleness": 1},
                       train={"steps_per_worker": 100000, "max_time_s": 600},
                       eval={"enabled": True, "every_s": 0.5}, workers={"device_ms": 20})  # few cores used
    out = tmp_path / "run"
    launcher = spawn(psgd_cmd("launch", str(cfg), "--out", str(out), "--quiet"), stdout=subprocess.DEVNULL,
                     stderr=subprocess.STDOUT, cwd=str(tmp_path))
    pids: list[int] = []
    try:
        assert wait_for(lambda: started(out), timeout=90), "run did not start"
        entries = json.loads((out / "processes.json").read_text())
        roles = {e["role"] for e in entries}
        assert roles == ({"allreduce", "evaluator"} if mode == "allreduce" else {"server", "worker", "evaluator"})
        pids += [e["pid"] for e in entries]
        assert all(alive(p) for p in pids)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        killed_at = time.monotonic()
        while any(alive(p) for p in pids) and time.monotonic() - killed_at < 5.0:
            time.sleep(0.05)
        left = {e["role"]: e["pid"] for e in entries if alive(e["pid"])}
        assert not left, f"still running 5 s after the launcher was killed: {left}"
        assert not (out / "processes.json").exists()
    finally:
        kill_tree(launcher)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
