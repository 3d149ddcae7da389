"""One process per node that imports torch and psgd once and forks every role the
RoleHost actors there start (`run.start_method: fork`), run after run.

Why: an exec'd role imports torch again, about 3 s of CPU a role, and a Ray run
starts every role (and every restart of one) in an actor of its own. The local
launcher forks its children from itself (orchestrate/fork.py); a Ray actor cannot
(it has no torch, and Ray's threads make fork() unsafe), so the first RoleHost on a
node starts this process (under a lock: one per node) and every RoleHost there asks
it for its role. The zygote decides with the local launcher's rule whether a fork is
allowed (orchestrate/spawn.py's `fork_allowed`: not for a GPU run) and answers
"exec" when it is not; the RoleHost then execs the role.

One zygote serves every run whose RoleHosts would start it the same way (`zygote_key`):
the same user, Ray node, interpreter, working directory, environment (less Ray's
own RAY_* variables, which differ by job) and psgd source files (an edited psgd
gets a zygote of its own). A child's environment is exactly its
RoleHost's. It stays IDLE_EXIT_S after its last RoleHost is gone, for the next run,
unless its node's raylet is gone too (no RoleHost of its key can come again).

The roles are the zygote's children: it reaps them and answers their exit codes.
A role still dies with its actor: the zygote SIGKILLs the session of a role whose
RoleHost is gone (as the role's own lifeline, runtime/lifeline.py, would end it
with its parent, without a graceful stop), and a role dies with the zygote (its
parent).

Requests are one JSON line each over a Unix socket in a directory only this user
may enter (mode 0700, checked).
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
from typing import IO, TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from psgd.orchestrate.fork import ForkedProcess

__all__ = ["ZygoteChild", "zygote_key", "zygote_socket", "fork_role"]

SOCKET_NAME = "sock"
START_TIMEOUT_S = 60.0   # the zygote's socket appears (it binds before its imports)
ANSWER_TIMEOUT_S = 120.0  # a start waits for the zygote's imports (seconds on a loaded node)
POLL_S = 0.5             # how often the zygote reaps its children and looks at its RoleHosts
IDLE_EXIT_S = 60.0       # the zygote exits this long after its last RoleHost (or its start) is gone
PACKAGE = Path(__file__).resolve().parents[2]  # psgd/


def zygote_key(node_id: str, package: Path = PACKAGE) -> str:
    """What a forked role inherits from its zygote, as one digest: RoleHosts with the same
    key share one zygote. The zygote is `python -m` started in the RoleHost's directory and
    environment, so its import path follows from those (not from the RoleHost's own, to
    which Ray adds each job's driver directory). Ray's RAY_* variables are left out
    (RAY_JOB_ID differs by run); the child gets its RoleHost's whole environment anyway."""
    env = sorted((k, v) for k, v in os.environ.items() if not k.startswith("RAY_"))
    sources = sorted((str(p), p.stat().st_mtime_ns) for p in package.rglob("*.py"))
    facts = [os.getuid(), node_id, sys.executable, os.getcwd(), env, sources]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def zygote_socket(key: str) -> Path:
    """The zygote socket for RoleHosts of `key` on this node."""
    return Path(tempfile.gettempdir()) / f"psgd-zygote-{key}" / SOCKET_NAME


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
    """The zygote answers at `path` (started here if none does); registers this
    process as one of its RoleHosts."""
    while True:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        made = path.parent.stat()
        if made.st_uid != os.getuid() or made.st_mode & 0o077:
            raise RuntimeError(f"{path.parent} is not this user's alone: not starting roles through it")
        try:
            lock = open(path.parent / "lock", "a")
        except FileNotFoundError:
            continue  # a leaving zygote removed the directory meanwhile
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per node
            if not _same_file(lock, path.parent / "lock"):
                continue  # the lock of a zygote that left while we waited: take the new one
            _greet_or_start(path)
            return


def _same_file(f: IO, path: Path) -> bool:
    try:
        return os.fstat(f.fileno()).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _greet_or_start(path: Path) -> None:
    hello = {"op": "hello", "host": os.getpid()}
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


def fork_role(node_id: str, args: list[str], log: Path, env: dict[str, str],
              config: Path) -> Optional[ZygoteChild]:
    """`python ARGS` (`-m psgd.cli ROLE ...`) forked by the zygote on this node (Ray's
    `node_id`), in environment `env` (whole), its output appended to `log`; None where
    the run's config does not allow a fork (the caller execs it)."""
    if args[:1] != ["-m"]:
        raise ValueError(f"a role command is `-m MODULE ...`, not {args[:2]}")
    path = zygote_socket(zygote_key(node_id))
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


def _exit_lock(path: Path) -> Optional[IO]:
    """The node's start lock, taken without waiting, or None while a RoleHost holds it
    (starting or greeting this zygote). Held while the zygote removes its socket and
    directory: a RoleHost waiting on it then finds them gone and starts anew."""
    lock = open(path.parent / "lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None
    return lock


def serve(path: Path) -> None:
    """The zygote: answer requests at `path` until IDLE_EXIT_S after its last RoleHost is gone."""
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
    raylet = int(os.environ.get("RAY_RAYLET_PID", "0"))  # set in every Ray worker, so in its RoleHosts
    idle_since = time.monotonic()
    held: Optional[IO] = None  # the start lock, once the zygote is leaving

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
        env = dict(request["env"])
        for name in set(os.environ) - set(env):  # what an earlier RoleHost had: not the child's
            del os.environ[name]
        child = fork_child(main, list(request["argv"]), Path(request["log"]), env,
                           close_fds=[listener.fileno(), conn.fileno()])
        children[child.pid] = child
        host_of[child.pid] = int(request["host"])
        return {"pid": child.pid}

    try:
        while held is None:
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
            for pid, child in list(children.items()):
                if _alive(host_of[pid]):
                    continue
                if child.poll() is None:
                    _kill_session(pid)
                else:  # reaped, and no RoleHost left to ask for it
                    del children[pid], host_of[pid]
            hosts.difference_update([h for h in hosts if not _alive(h)])
            if hosts:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= IDLE_EXIT_S or (raylet and not _alive(raylet)):
                held = _exit_lock(path)
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        log = path.parent / "zygote.log"
        if log.exists() and log.stat().st_size == 0:  # a log with something in it stays, with its directory
            log.unlink()
        if held is not None:
            (path.parent / "lock").unlink(missing_ok=True)
            try:
                path.parent.rmdir()
            except OSError:
                pass
            held.close()


if __name__ == "__main__":
    # Detached from the RoleHost that starts it (the first process exits at once): Ray kills
    # an actor's child processes with the actor, and this one serves every RoleHost on
    # this node.
    if os.fork():
        os._exit(0)
    serve(Path(sys.argv[1]))
