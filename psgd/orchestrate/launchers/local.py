"""`--on local` (the default): every role a child process on this machine (psgd.orchestrate.launcher)."""
from __future__ import annotations

REQUIRES: dict[str, str] = {}


def launcher_class() -> type:
    from psgd.orchestrate.launcher import Launcher
    return Launcher
