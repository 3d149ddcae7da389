"""The Ray actor that hosts one psgd process (a server shard, a worker or the
evaluator) on whichever node Ray placed it with the role's resources.

The actor starts the role as a child process (`python -m psgd.cli ROLE ...`) as the
local launcher does (the roles keep their own signal handling, and a child
whose actor dies notices it is orphaned and stops): forked by the zygote on
this node (ray/zygote.py), which imported torch once for every role there,
or exec'd where the run may not fork (a GPU run). It works in the launcher's
run directory when that directory is visible from its node (same node or a
shared filesystem: it finds the launcher's token file there); otherwise in a
directory of its own on its node, from which the launcher fetches what it
needs. Either way the role's events reach the launcher through Ray calls, so
metrics.jsonl, the summary and the progress bar need no shared filesystem.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import ray

from psgd.orchestrate.ray.zygote import ZygoteChild, fork_role
from psgd.orchestrate.roles import CONFIG_FILE
from psgd.runtime.events import EventTail
from psgd.runtime.files import atomic_write
from psgd.runtime.role import START_FILE

__all__ = ["RoleHost", "TOKEN_FILE"]

TOKEN_FILE = "ray-token"   # written by the launcher into the run directory


@ray.remote(max_restarts=0)
class RoleHost:
    """One role process and the files it writes, on this actor's node."""

    def __init__(self, run_dir: str, token: str):
        here = Path(run_dir)
        try:
            shared = (here / TOKEN_FILE).read_text() == token
        except OSError:
            shared = False
        self.shared = shared
        self.workdir = here if shared else Path(tempfile.mkdtemp(prefix="psgd-ray-"))
        self.proc: Optional[subprocess.Popen | ZygoteChild] = None
        self.events: Optional[EventTail] = None
        self.log: Optional[Path] = None

    def info(self) -> dict:
        return {"node_ip": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
                "shared": self.shared, "workdir": str(self.workdir), "pid": os.getpid()}

    def reserve_address(self, host: str) -> str:
        """'host:port' with a port free on this node now: the server shard binds it."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return f"{host}:{s.getsockname()[1]}"

    def start(self, args: list[str], env: dict, role: str, index: int, config_text: str) -> int:
        """Start (or restart) the role: `python ARGS` with this node's interpreter,
        on the run's resolved config (written here first when the run directory is
        not visible from this node). Returns the child's pid."""
        if not self.shared:
            atomic_write(self.workdir / CONFIG_FILE, config_text)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "logs" / f"{role}-{index}.log"
        # Earlier incarnations' events were reported already: read only what this one writes.
        self.events = EventTail(self.workdir / "events" / f"{role}-{index}.jsonl", from_end=True)
        env = {**os.environ, **env}
        self.proc = fork_role(ray.get_runtime_context().get_node_id(), args, self.log, env,
                              self.workdir / CONFIG_FILE)
        if self.proc is None:  # no fork for this run (a GPU run, run.start_method: exec)
            with open(self.log, "ab") as out:
                self.proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self.proc.pid

    def poll(self) -> tuple[list[dict], Optional[int], str]:
        """(new events, exit code or None while running, last log line once it has
        exited). The exit code is read first, so the events include everything an
        exited child wrote."""
        code = self.proc.poll() if self.proc is not None else None
        events = self.events.read() if self.events is not None else []
        return events, code, self._last_log_line() if code is not None else ""

    def send_signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the child's whole process group and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def write_start(self, t0: float) -> None:
        """The common training clock, for roles in a directory of their own."""
        if not self.shared:
            atomic_write(self.workdir / START_FILE, json.dumps({"t0": t0}))

    def fetch(self, name: str) -> Optional[bytes]:
        """A file the role wrote under its directory (model.pt, its log), or None."""
        try:
            return (self.workdir / name).read_bytes()
        except OSError:
            return None

    def _last_log_line(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except (OSError, AttributeError):
            return "no output"
        return lines[-1][:300] if lines else "no output"
