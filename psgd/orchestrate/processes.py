"""Where a run's processes live: the interface the launcher supervises them through.

The supervisor (supervisor.py) owns the run: its directory, the event stream, the
training clock, restarts and the order in which the job stops. A ProcessHost
owns the processes: where each role starts, how its status and events are
read, how a group is stopped, and what comes back from a node of its own.
LocalProcesses starts children on this machine; RayProcesses
(ray/launcher.py) starts them in Ray actors. Each role's process is a
RoleProcess.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

from psgd.config import Config, override_config
from psgd.core.restarts import RestartBudget
from psgd.orchestrate.spawn import kill, spawn_child
from psgd.orchestrate.states import ChildState
from psgd.runtime.lifeline import heartbeat_path
from psgd.runtime.ports import free_ports

__all__ = ["LocalProcesses", "LossReport", "ProcessHost", "RoleProcess"]


class RoleProcess(Protocol):
    """One role's process, as the launcher sees it."""
    role: str
    index: int
    address: Optional[str]   # a server's "host:port"
    state: ChildState        # STARTING -> READY -> DONE (states.py)

    @property
    def name(self) -> str: ...          # for messages: role, index, pid (and node)

    def poll(self) -> Optional[int]: ...  # exit code, None while it runs

    def read_events(self) -> list[dict]: ...  # events written since the last call

    def cause(self) -> str: ...         # the last line it printed: why it exited

    def terminate(self) -> None: ...    # ask it to stop (SIGTERM)


@dataclass(frozen=True)
class LossReport:
    """Processes gone with their node: the event that says so, and why the run
    cannot go on (None: the lost roles are being replaced)."""
    event: dict
    fatal: Optional[str]


class ProcessHost(Protocol):
    def resolve(self, cfg: Config, resume: bool) -> Config:
        """The config with the addresses and ports this run uses filled in.
        Raises LaunchFailed when the job cannot run here."""

    def start(self, cfg: Config, role: str, index: int, address: Optional[str]) -> RoleProcess: ...

    def describe(self, proc: RoleProcess) -> dict:
        """Its entry in processes.json."""

    def training_started(self, t0: float) -> None:
        """The start signal, for roles that cannot see the run directory's start file."""

    def refresh(self, procs: list[RoleProcess]) -> None:
        """One round of reading every process's status and events."""

    def losses(self, procs: list[RoleProcess], budget: RestartBudget, t: float) -> list[LossReport]:
        """Roles lost with a node since the last call (their processes count as exited)."""

    def worker_room(self, cfg: Config) -> Optional[int]:
        """How many workers the host can run now (elastic workers), None: as many as asked.
        A host whose FILLS_ROOM is true grows an elastic run to this room by itself."""

    def release(self, proc: RoleProcess) -> None:
        """An elastic worker left the run: give back what its process held."""

    def silent(self, procs: list[RoleProcess], after_s: float) -> list[tuple[RoleProcess, float]]:
        """Those of `procs` still running whose heartbeat is older than `after_s` (frozen),
        each with its age in seconds."""

    def stop(self, group: list[RoleProcess], grace_s: float) -> Optional[list[RoleProcess]]:
        """Stop `group`: SIGTERM, then kill what is still running after `grace_s`; returns
        those it killed (None: the host cannot tell)."""

    def collect(self, procs: list[RoleProcess]) -> None:
        """Bring back what roles wrote where the run directory cannot see it."""

    def close(self) -> None: ...


class LocalProcesses:
    """Children of this process, on this machine (spawn.py)."""
    FILLS_ROOM = False  # elastic workers grow when psgd ctl asks (psgd/orchestrate/elastic.py)

    def __init__(self, run_dir: Path, child_main: Optional[Callable[[list[str]], int]] = None):
        self.run_dir, self.child_main = run_dir, child_main

    def resolve(self, cfg: Config, resume: bool) -> Config:
        sets = []
        cluster = cfg.cluster
        if not cfg.consistency.mode.on_servers:
            if not cluster.allreduce_port:
                sets.append(f"cluster.allreduce_port={free_ports(cluster.host, 1)[0]}")
        elif isinstance(cluster.servers, int):
            addresses = [f"{cluster.host}:{p}" for p in free_ports(cluster.host, cluster.servers)]
            sets.append("cluster.servers=" + json.dumps(addresses))
        return override_config(cfg, sets)

    def start(self, cfg: Config, role: str, index: int, address: Optional[str]) -> RoleProcess:
        return spawn_child(cfg, role, index, self.run_dir, address, self.child_main)

    def describe(self, proc) -> dict:
        return {"role": proc.role, "index": proc.index, "pid": proc.proc.pid,
                **({"address": proc.address} if proc.address else {})}

    def training_started(self, t0: float) -> None:
        pass  # every child reads the start file in the run directory

    def refresh(self, procs) -> None:
        pass  # children are polled directly

    def losses(self, procs, budget: RestartBudget, t: float) -> list[LossReport]:
        return []  # one machine: no node to lose without the launcher

    def worker_room(self, cfg: Config) -> Optional[int]:
        return None

    def release(self, proc) -> None:
        pass  # its process has exited: nothing else holds a place for it

    def silent(self, procs, after_s: float) -> list:
        now, out = time.time(), []
        for p in procs:
            try:
                age = now - heartbeat_path(self.run_dir, p.role, p.index).stat().st_mtime
            except OSError:
                continue  # not beating yet: it has not reached start_role
            if age > after_s and p.poll() is None:
                out.append((p, age))
        return out

    def stop(self, group, grace_s: float) -> list:
        running = [p for p in group if p.poll() is None]
        for p in running:
            p.terminate()
        deadline = time.monotonic() + grace_s
        killed = []
        for p in running:
            try:
                p.proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill(p.proc)
                killed.append(p)
        return killed

    def collect(self, procs) -> None:
        pass  # they wrote into the run directory

    def close(self) -> None:
        pass

