"""`psgd bench faults` SIGKILLs the pids processes.json lists only while they still belong
to the run (issue 48, item 4): a pid listed there may have exited and been given to an
unrelated process, which the storm must leave alone; a live child of the launcher is killed."""
import json
import subprocess
import time

import pytest
from conftest import kill_tree, spawn

from psgd.bench.faults import _storm
from psgd.config.modes import Role
from psgd.runtime.lifeline import PROCESSES_FILE
from psgd.runtime.role import START_FILE

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(30)
def test_the_storm_kills_the_launchers_child_and_leaves_a_stranger_alone(tmp_path):
    launcher = spawn(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    stranger = spawn(["sleep", "60"])  # the number a listed process left behind, now another's
    try:
        child = int(launcher.stdout.readline())
        (tmp_path / START_FILE).write_text(json.dumps({"t0": time.time() - 1.0}))
        (tmp_path / PROCESSES_FILE).write_text(json.dumps([
            {"role": "worker", "index": 0, "pid": stranger.pid},
            {"role": "worker", "index": 1, "pid": child}]))
        kills = _storm(launcher, tmp_path, [(0.0, 0), (0.0, 1)], Role.WORKER)
        assert [(k.index, k.pid) for k in kills] == [(1, child)]
        assert launcher.wait(timeout=10) == 0  # its child was killed: `wait` returned
        assert stranger.poll() is None  # not the run's: left running
    finally:
        kill_tree(stranger)
        kill_tree(launcher)
