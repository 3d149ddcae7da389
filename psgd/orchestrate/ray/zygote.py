"""One process per node and run that imports torch and psgd once and forks every
role the run's RoleHost actors start on that node (`run.start_method: fork`).

Why: an exec'd role imports torch again, about 3 s of CPU a role, and a Ray run
starts every role (and every restart of one) in an actor of its own. The local
launcher forks its children from itself (orchestrate/fork.py); a Ray actor cannot
(it has no torch, and Ray's threads make fork() unsafe), so the first RoleHost of
a run on a node starts this process (under a lock: one per node) and every
RoleHost there asks it for its role. The zygote decides with the local launcher's
rule whether a fork is allowed (orchestrate/spawn.py's `fork_allowed`: not for a
GPU run) and answers "exec" when it is not; the RoleHost then execs the role.

The roles are the zygote's children: it reaps them and answers their exit codes.
A role still dies with its actor: the zygote SIGKILLs the session of a role whose
RoleHost is gone (as the role's own lifeline, runtime/lifeline.py, would end it
with its parent, without a graceful stop), and a role dies with the zygote (its
parent). The zygote exits once every RoleHost that asked it is gone.

Requests are one JSON line each over a Unix socket in a directory only this user
may enter (mode 0700).
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from psgd.orchestrate.fork import ForkedProcess

__all__ = ["ZygoteChild", "zygote_socket", "fork_role"]

SOCKET_NAME = "sock"
START_TIMEOUT_S = 60.0   # the zygote's socket appears (it binds before its imports)
ANSWER_TIMEOUT_S = 120.0  # a start waits for the zygote's imports (seconds on a loaded node)
POLL_S = 0.5             # how often the zygote reaps its children and looks at its RoleHosts
IDLE_EXIT_S = 60.0       # a zygote no RoleHost ever asked exits after this


def zygote_socket(token: str) -> Path:
    """The run's zygote socket on this node (named by a digest: the token is the run's secret)."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"psgd-zygote-{digest}" / SOCKET_NAME


def _ask(path: Path, request: dict, timeout: float = ANSWER_TIMEOUT_S) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(json.dumps(request).encode() + b"\n")
        with s.makefile("rb") as f:
            line = f.readline()
    if not line:
        raise ConnectionError("the zygote closed the connection without an answer")
    return json.loads(line)


def _ensure(path: Path) -> None:
    """The run's zygote on this node answers at `path` (started here if none does);
    registers this process as one of its RoleHosts."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    hello = {"op": "hello", "host": os.getpid()}
    with open(path.parent / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per node
        try:
            _ask(path, hello)
            return
        except OSError:
            path.unlink(missing_ok=True)  # a dead zygote's socket
        with open(path.parent / "zygote.log", "ab") as log:
            subprocess.run([sys.executable, "-m", __name__, str(path)], stdin=subprocess.DEVNULL, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True, timeout=START_TIMEOUT_S, check=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the role zygote did not start within {START_TIMEOUT_S:.0f} s "
                                   f"(see {path.parent / 'zygote.log'})")
            time.sleep(0.05)
        _ask(path, hello)


class ZygoteChild:
    """A role forked by the zygote, with the pid/poll/wait/send_signal of subprocess.Popen."""

    def __init__(self, path: Path, pid: int):
        self.path, self.pid = path, pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                self.returncode = _ask(self.path, {"op": "poll", "pid": self.pid})["code"]
            except OSError:  # the zygote is gone, and with it the reaper of this child
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def fork_role(token: str, args: list[str], log: Path, env: dict[str, str], config: Path) -> Optional[ZygoteChild]:
    """`python ARGS` (`-m psgd.cli ROLE ...`) forked by the run's zygote on this node,
    its output appended to `log`; None where the run's config does not allow a fork
    (the caller execs it)."""
    if args[:1] != ["-m"]:
        raise ValueError(f"a role command is `-m MODULE ...`, not {args[:2]}")
    path = zygote_socket(token)
    _ensure(path)
    answer = _ask(path, {"op": "start", "host": os.getpid(), "module": args[1], "argv": args[2:],
                         "log": str(log), "env": env, "config": str(config)})
    if "error" in answer:
        raise RuntimeError(f"the role zygote could not start the role: {answer['error']}")
    return None if answer.get("exec") else ZygoteChild(path, answer["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # a forked role leads a session of its own: pgid == pid
    except ProcessLookupError:
        pass


def serve(path: Path) -> None:
    """The zygote: answer requests at `path` until every RoleHost that asked is gone."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))  # first: requests wait in the backlog while the imports below run
    listener.listen(64)
    listener.settimeout(POLL_S)
    from psgd.config import load_config
    from psgd.orchestrate.fork import fork_child, preload
    from psgd.orchestrate.spawn import fork_allowed
    mains: dict[str, Callable[[list[str]], int]] = {}
    children: dict[int, "ForkedProcess"] = {}
    host_of: dict[int, int] = {}  # a child's pid -> its RoleHost's
    hosts: set[int] = set()
    started = time.monotonic()

    def answer(request: dict, conn: socket.socket) -> dict:
        if "host" in request:
            hosts.add(int(request["host"]))
        if request["op"] == "hello":
            return {}
        if request["op"] == "poll":
            child = children.get(int(request["pid"]))
            return {"code": -signal.SIGKILL if child is None else child.poll()}
        module = request["module"]
        main = mains.get(module) or mains.setdefault(module, importlib.import_module(module).main)
        cfg = load_config(Path(request["config"]))
        if not fork_allowed(cfg, main):
            return {"exec": True}
        preload(cfg)
        child = fork_child(main, list(request["argv"]), Path(request["log"]), dict(request["env"]),
                           close_fds=[listener.fileno(), conn.fileno()])
        children[child.pid] = child
        host_of[child.pid] = int(request["host"])
        return {"pid": child.pid}

    try:
        while any(_alive(h) for h in hosts) if hosts else time.monotonic() - started < IDLE_EXIT_S:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                conn = None
            if conn is not None:
                with conn:
                    conn.settimeout(ANSWER_TIMEOUT_S)
                    try:
                        with conn.makefile("rb") as f:
                            request = json.loads(f.readline())
                        reply = answer(request, conn)
                    except Exception as exc:  # noqa: BLE001 - one bad request is answered, not fatal
                        reply = {"error": f"{type(exc).__name__}: {exc}"}
                    try:
                        conn.sendall(json.dumps(reply).encode() + b"\n")
                    except OSError:
                        pass
            for pid, child in children.items():
                if child.poll() is None and not _alive(host_of[pid]):
                    _kill_session(pid)
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        log = path.parent / "zygote.log"
        if log.exists() and log.stat().st_size == 0:  # a log with something in it stays, with its directory
            log.unlink()
        (path.parent / "lock").unlink(missing_ok=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass  # a RoleHost of this run started anew meanwhile: the directory is its now


if __name__ == "__main__":
    # Detached from the RoleHost that starts it (the first process exits at once): Ray kills
    # an actor's child processes with the actor, and this one serves every RoleHost of the
    # run on this node.
    if os.fork():
        os._exit(0)
    serve(Path(sys.argv[1]))
