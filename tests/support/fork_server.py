"""Start `python -m psgd.cli ...` children of the test suite by forking a process that
has imported torch and psgd already, as the launcher starts its own roles
(`run.start_method: fork`, psgd/orchestrate/fork.py).

A fresh interpreter spends about 3 s of CPU importing torch before `main` runs, and
the suite starts a few hundred psgd commands on two cores. The forked child is still
a real process in its own session, with its own stdin/stdout/stderr, working
directory, environment and arguments, and it runs the same `main` that
`python -m psgd.cli` runs; only the imports are done once.

The server (run as a script) listens on a Unix socket. A client sends the command's
arguments, directory and environment, and its three standard descriptors (SCM_RIGHTS);
the server forks, answers the child's pid, and later its exit code. `ForkedCommand`
is the part of subprocess.Popen the tests use. A command whose environment differs
from the server's (something torch or psgd may read at import) is exec'd instead
(`conftest.spawn` decides), and PSGD_TESTS_EXEC=1 execs every command.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from psgd.orchestrate.fork import ForkedProcess

# Compiled bytecode is cached and reused, by this process and every interpreter the suite starts
# (roles exec'd, Ray actors, torchrun ranks, spawned benchmark children), not compiled again in
# each: where PYTHONDONTWRITEBYTECODE is set (some containers set it) that costs about 1 s of CPU
# a start, and each xdist worker's collection about 7 s. Before START_ENV: the children's.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

VOLATILE = {"PYTEST_CURRENT_TEST"}  # pytest rewrites it per test; nothing imports it
START_ENV = dict(os.environ, PYTHONUNBUFFERED="1")  # the suite's, before any test changes it


def torch_written() -> dict[str, str]:
    """What torch itself wrote into os.environ, with the value: the first import of torch._dynamo
    (a torch.optim optimizer's first construction, a FLOP count) sets TORCHINDUCTOR_CACHE_DIR to
    its default, which a fresh interpreter would pick too. Left in the comparison, it made every
    later command of that test process an exec (~3 s of CPU each, more for a DiLoCo or `--on sim`
    run, which import torch._dynamo again)."""
    cache = sys.modules.get("torch._inductor.runtime.cache_dir_utils")  # absent: torch wrote nothing
    return {} if cache is None else {"TORCHINDUCTOR_CACHE_DIR": cache.default_cache_dir()}


def environment_matches(env: dict[str, str], server_env: dict[str, str]) -> bool:
    written = torch_written()
    strip = lambda e: {k: v for k, v in e.items() if k not in VOLATILE and written.get(k) != v}  # noqa: E731
    return strip(env) == strip(server_env)


# ---- the server ------------------------------------------------------------------------------

def _child(request: dict, fds: list[int], listener: socket.socket, conn: socket.socket) -> None:
    from psgd.cli import main
    from psgd.orchestrate.fork import run_forked

    def prepare() -> None:
        listener.close()
        conn.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # what `python -m` puts first: a user's model module in the cwd imports
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL if s != signal.SIGINT else signal.default_int_handler)

    run_forked(main, request["args"], prepare, exit_handlers=True)


def _preload_bench() -> None:
    """What `psgd bench convergence`, `tune staleness` and `plot` import after they start: the
    simulator, the statistics, TensorBoard's writer (bench runs log to it) and pyplot on Agg,
    about 3 s of CPU a command. None of them starts a thread."""
    import psgd.bench.convergence  # noqa: F401
    import psgd.bench.tune  # noqa: F401
    import psgd.sim.allreduce  # noqa: F401
    from psgd.bench.pyplot import pyplot
    pyplot()
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:  # not installed: the runs do without it
        pass


def serve(path: str) -> None:
    import torch  # noqa: F401 - the imports every child would otherwise repeat
    torch.set_num_threads(1)
    # A run on the simulator counts its step's FLOPs under a torch dispatch mode, whose first
    # use imports torch._dynamo (about 2.5 s of CPU): once here, not in every forked `--on sim`.
    # The import starts no thread, so forking after it stays safe.
    import torch._dynamo  # noqa: F401

    import psgd.cli  # noqa: F401
    import psgd.orchestrate.fork  # noqa: F401 - what every child runs in (_child)
    import psgd.servers.shard  # noqa: F401
    import psgd.workers.evaluator  # noqa: F401
    import psgd.workers.worker  # noqa: F401
    _preload_bench()

    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    waiting: dict[int, socket.socket] = {}  # child pid -> the client's connection
    while os.getppid() == parent:  # the test process is gone: so is its server
        ready, _, _ = select.select([listener], [], [], 0.02)
        if ready:
            conn, _ = listener.accept()
            payload, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            request = json.loads(payload)
            pid = os.fork()
            if pid == 0:
                _child(request, fds, listener, conn)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


# ---- the client ------------------------------------------------------------------------------

class _Server:
    def __init__(self) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="psgd-forks-"), "sock")
        self.env = START_ENV
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], env=self.env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def connect(self, timeout: float = 120.0) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.path)
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the test fork server did not start (exit {self.proc.poll()})") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_server: Optional[_Server] = None


def server() -> _Server:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
        atexit.register(_server.close)
    return _server


class _Reader(threading.Thread):
    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.parts = stream, []

    def run(self) -> None:
        for part in iter(lambda: self.stream.read(65536), "" if hasattr(self.stream, "encoding") else b""):
            self.parts.append(part)

    def text(self):
        return ("" if hasattr(self.stream, "encoding") else b"").join(self.parts)


class ForkedCommand(ForkedProcess):
    """A psgd command forked by the server, with the pid/poll/wait/communicate/signals
    of subprocess.Popen and its stdout/stderr pipes: the launcher's ForkedProcess whose
    status comes from the server (the child is the server's, not ours to wait for)."""

    def __init__(self, args: list[str], cwd: Optional[str], env: dict[str, str], stdout=None, stderr=None,
                 text: bool = False, via: Optional[_Server] = None) -> None:
        self.stdout = self.stderr = None
        keep, send = [], [os.open(os.devnull, os.O_RDONLY)]
        for which, spec in (("stdout", stdout), ("stderr", stderr)):
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                setattr(self, which, open(read, "r" if text else "rb", **({"encoding": "utf-8"} if text else {})))
                send.append(write)
                keep.append(write)
            elif spec == subprocess.STDOUT:
                send.append(send[1])
            elif spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_WRONLY)
                send.append(fd)
                keep.append(fd)
            elif spec is None:
                send.append(1 if which == "stdout" else 2)
            else:
                send.append(spec if isinstance(spec, int) else spec.fileno())
        self._sock = (via or server()).connect()  # `via`: a server of the caller's (one in a namespace)
        request = {"args": args[3:], "cwd": cwd or os.getcwd(), "env": env}
        socket.send_fds(self._sock, [json.dumps(request).encode()], send)
        os.close(send[0])
        for fd in keep:
            os.close(fd)
        self._lines = self._sock.makefile("r")
        super().__init__(int(self._lines.readline()), args)
        self._readers = [_Reader(s) for s in (self.stdout, self.stderr) if s is not None]

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            ready, _, _ = select.select([self._sock], [], [], 0)
            if ready:
                self._finish()
        return self.returncode

    def _finish(self) -> None:
        line = self._lines.readline()
        self.returncode = int(line) if line.strip() else -signal.SIGKILL  # the server died with it
        self._lines.close()
        self._sock.close()

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._finish()
        return self.returncode

    def communicate(self, input=None, timeout: Optional[float] = None):  # noqa: A002 - Popen's name
        for reader in self._readers:
            if not reader.is_alive() and reader.ident is None:
                reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        self.wait(timeout)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        out = {id(r.stream): r.text() for r in self._readers}
        return (out.get(id(self.stdout)) if self.stdout else None, out.get(id(self.stderr)) if self.stderr else None)


if __name__ == "__main__":
    serve(sys.argv[1])
