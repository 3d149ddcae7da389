"""`--on local` (the default): every role a child process on this machine, supervised by
psgd.orchestrate.supervisor over LocalProcesses."""
from __future__ import annotations

REQUIRES: dict[str, str] = {}


def launcher_class() -> type:
    from psgd.orchestrate.supervisor import Supervisor
    return Supervisor
