"""Which host a process runs on and how many cores it may use: a run records both in its
roles' ready events, so a later reader (psgd sim calibrate, on another machine) judges the
run's CPU load against the run's own hosts, not its own."""
from __future__ import annotations

import os
import socket

__all__ = ["host_fields", "usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def host_fields() -> dict:
    """The fields a role's ready event carries about its host."""
    return {"host": socket.gethostname(), "cores": usable_cores()}
