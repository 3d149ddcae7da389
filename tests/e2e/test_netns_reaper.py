"""tests/support/netns_reaper.py: what a test made (namespaces, the processes in
them, its directories) goes when the test process dies without cleaning up."""
import os
import secrets
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import kill_tree, spawn, wait_for

from psgd.bench.netns_reaper import REAPER, ns_pids

pytestmark = pytest.mark.e2e


# The owner starts the reaper, says its pid, and waits to be killed.
OWNER = """
import subprocess, sys, time
reaper = subprocess.Popen([sys.executable, sys.argv[1], str(__import__("os").getpid()), sys.argv[2], "--",
                           sys.argv[3]], start_new_session=True)
print(reaper.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(60)
def test_a_killed_owner_leaves_no_namespace_process_or_directory_behind(tmp_path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the `ip` tool")
    ns = f"psgd-reap-{secrets.token_hex(3)}"
    made = tmp_path / "made"
    made.mkdir()
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        pytest.skip("cannot create network namespaces here")
    sleeper = owner = None
    try:
        sleeper = spawn(["ip", "netns", "exec", ns, "sleep", "300"])
        owner = spawn([sys.executable, "-c", OWNER, str(REAPER), ns, str(made)], stdout=subprocess.PIPE, text=True)
        reaper = int(owner.stdout.readline())
        assert wait_for(lambda: sleeper.pid in ns_pids(ns), timeout=10)
        assert _alive(reaper) and made.exists()  # nothing happens while the owner lives

        os.kill(owner.pid, signal.SIGKILL)  # as a hard timeout or a cancelled CI job would
        assert wait_for(lambda: ns not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                         text=True).stdout, timeout=20)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert wait_for(lambda: not made.exists(), timeout=10)  # the directories go after the namespaces
        assert wait_for(lambda: not _alive(reaper), timeout=10)
    finally:
        for proc in (sleeper, owner):
            if proc is not None:
                kill_tree(proc)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
