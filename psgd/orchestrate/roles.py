"""The one table of process roles: what each runs, its index flag, and how
the launcher starts it as a child.

Every child is `python -m psgd.cli ROLE RUN_DIR/config.yaml --FLAG I`: it reads
the run's resolved config once and runs the role's function in-process. The
role modules are imported when a role runs, not when the table is read, so
`psgd --help` and the launcher stay light.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from psgd.config import Config, dump_config
from psgd.runtime.event_names import Event
from psgd.runtime.files import atomic_write
from psgd.runtime.role import RoleContext, RoleFailed, start_role
from psgd.runtime.run_lock import RoleLock, RunDirRefused

__all__ = ["RoleSpec", "ROLES", "run_role", "child_command", "CONFIG_FILE"]

CONFIG_FILE = "config.yaml"  # the resolved config every child of a run reads


def _server(ctx: RoleContext) -> int:
    from psgd.servers.serve import run_role
    return run_role(ctx)


def _worker(ctx: RoleContext) -> int:
    from psgd.workers.worker import run_role
    return run_role(ctx)


def _evaluator(ctx: RoleContext) -> int:
    from psgd.workers.evaluator import run_role
    return run_role(ctx)


def _allreduce(ctx: RoleContext) -> int:
    from psgd.workers.allreduce_worker import run_role
    return run_role(ctx)


@dataclass(frozen=True)
class RoleSpec:
    name: str
    index_flag: str                      # --shard / --rank / --index
    help: str
    run: Callable[[RoleContext], int]


ROLES: dict[str, RoleSpec] = {r.name: r for r in (
    RoleSpec("server", "--shard", "run one server shard (multi-host runs)", _server),
    RoleSpec("worker", "--rank", "run one worker (multi-host runs)", _worker),
    RoleSpec("evaluator", "--index", "run the periodic evaluator (multi-host runs)", _evaluator),
    RoleSpec("allreduce", "--rank", "run one rank of the all-reduce baseline", _allreduce),
)}


def run_role(role: str, index: int, cfg: Config, run_dir: Optional[Path] = None, supervised: bool = False) -> int:
    """Run `role` in this process to its end; returns its exit code. Raises
    ConfigError (a config the role cannot run) or RoleFailed (could not start,
    e.g. a launcher or the same role and index holds the run directory).
    A hand-started role holds its run directory's RoleLock for its life; a
    supervised one (a launcher's child, a `psgd run` rank) works under its starter's."""
    if run_dir is None or supervised:
        return ROLES[role].run(start_role(role, index, cfg, run_dir, supervised))
    lock = role_lock(Path(run_dir), role, index)
    try:
        keep_config(Path(run_dir), cfg)
        ctx = start_role(role, index, cfg, run_dir, supervised)
        if not lock.held:
            ctx.events.emit(Event.RUN_DIR_UNLOCKED, reason="the run directory's filesystem has no flock")
        return ROLES[role].run(ctx)
    finally:
        lock.release()


def keep_config(run_dir: Path, cfg: Config) -> None:
    """A hand-started role leaves its resolved config in the run directory (the
    first one to start writes it), so `psgd collect RUN_DIR` finds it there."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        atomic_write(path, dump_config(cfg))


def role_lock(run_dir: Path, role: str, index: int) -> RoleLock:
    """The held RoleLock of a hand-started role; RoleFailed (not retried) when refused."""
    try:
        return RoleLock(run_dir, role, index).acquire()
    except (RunDirRefused, OSError) as exc:
        raise RoleFailed(str(exc), retry=False) from None


def child_command(role: str, index: int, run_dir: Path) -> list[str]:
    """The command line the launcher starts a supervised child with."""
    return [sys.executable, "-m", "psgd.cli", role, str(Path(run_dir) / CONFIG_FILE),
            ROLES[role].index_flag, str(index), "--run-dir", str(run_dir), "--supervised"]
