"""A process started under a parent that dies exits within the grace period,
and removes processes.json (the file lists it)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

# A middle process starts a child that watches it, prints the child's pid, then dies.
CHILD = textwrap.dedent("""
    import os, sys, time, threading
    from pathlib import Path
    from psgd.runtime.lifeline import watch_parent, forget_processes_file
    run_dir = Path(sys.argv[1])
    watch_parent(int(sys.argv[2]), lambda: forget_processes_file(run_dir, os.getpid()))
    while True:          # a role busy with its own work
        sum(range(10000))
""")
MIDDLE = textwrap.dedent("""
    import json, os, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], str(os.getpid())])
    with open(os.path.join(sys.argv[2], "processes.json"), "w") as f:
        json.dump([{"role": "worker", "index": 0, "pid": child.pid}], f)
    print(child.pid, flush=True)
    sys.stdin.read()     # until the test kills us
""")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_child_exits_when_its_parent_is_killed(tmp_path):
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, CHILD, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(middle.stdout.readline())
        assert alive(child)
        time.sleep(0.3)
        middle.kill()
        middle.wait()
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(child), "orphaned child outlived its parent by 5 s"
        assert not (tmp_path / "processes.json").exists()
    finally:
        middle.kill()
