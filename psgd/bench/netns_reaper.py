"""Removes network namespaces, every process in them and some directories once
the process that made them is gone without doing it itself (a run killed
outright, or pytest-timeout's thread method, which exits without running
fixture teardowns):

    python netns_reaper.py OWNER_PID NAMESPACE... -- DIRECTORY...

It waits while OWNER_PID is its parent; its owner (psgd.bench.shaped_net's
ShapedStar, the tests' TwoNodeRay) stops it (SIGTERM) after cleaning up by
itself. Run as a file it imports nothing of psgd: it starts in a blink and
sleeps until needed.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

POLL_S = 0.2
REAPER = os.path.abspath(__file__)  # run it as this file: python REAPER ...


def ns_pids(ns: str) -> list[int]:
    res = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
    return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []


def kill_all(ns: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process in the namespace, by pid (Ray's own `ray stop` matches
    names machine-wide), until none is left; returns the pids killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = ns_pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return killed


def remove(namespaces: list[str], directories: list[str]) -> None:
    """Every process in the namespaces, the namespaces, then the directories."""
    for ns in namespaces:
        kill_all(ns)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    for d in directories:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str]) -> int:
    owner, rest = int(argv[0]), argv[1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    namespaces, directories = rest[:cut], rest[cut + 1:]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the owner cleaned up itself
    while os.getppid() == owner:
        time.sleep(POLL_S)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # from here on, finish the job
    remove(namespaces, directories)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
