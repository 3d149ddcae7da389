"""One interpreter that has imported torch and psgd, from which `run.sh --dry` forks every
`python ...` it would otherwise start fresh: the checks, and the psgd commands they run.

A fresh interpreter spends about 3 s of CPU importing torch (and a run on the simulator
2.5 s more on torch._dynamo); a dry run started about twenty. A forked command is still a
process of its own, in its own session, with the caller's arguments, working directory,
environment, stdin/stdout/stderr and exit code; only the imports are done once. The device
run does not use it: there every check starts its own interpreter, as a user's would.

    python preloaded.py serve NAME        preload, then fork on request until run.sh ends
    python preloaded.py wait NAME PID     return once NAME answers; exit 1 if PID ended first
    python preloaded.py run NAME ARGV...  `python ARGV...` (SCRIPT ARGS or -m MODULE ARGS) forked there

NAME is an abstract Unix socket (no path: run.sh's work folder may be too deep for one),
answering only its own user. A request is JSON {argv, cwd, env} with the three standard
descriptors (SCM_RIGHTS); the answer is the child's pid, then its exit code. A client that
goes away first (run.sh's timeout killed it) takes its command with it: SIGTERM to the
command's session, SIGKILL 5 s later, as `timeout -k 5` does. This file imports only the
standard library at the top: `run` and `wait` start in milliseconds.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

ENV = "PSGD_GPU_PRELOADED"  # the server's NAME, for the checks' own psgd commands (check_kit.psgd)
# What the dry run's commands import, in order; preloading starts no Python thread (checked).
PRELOAD = ("torch", "psgd.cli", "torch._dynamo", "psgd.orchestrate.fork", "psgd.servers.shard",
           "psgd.workers.worker", "psgd.workers.evaluator", "psgd.orchestrate.doctor", "psgd.sim.calibrate",
           "psgd.bench.comm", "psgd.bench.overlap", "check_kit", "sim_batched", "codecs_check")
KILL_AFTER_S = 5.0  # SIGTERM, then SIGKILL: run.sh's `timeout -k 5`
START_TIMEOUT_S = 300.0  # the preload on a loaded machine


def _address(name: str) -> str:
    return "\0" + name


# ---- the server ------------------------------------------------------------------------------

def preload() -> str:
    """Import PRELOAD, up to the first that fails (a broken psgd: what follows needs it, and
    each command meets the error in its own process, as an exec'd interpreter would). Returns
    that failure, or ""."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported; the commands meet it themselves
            return f"{name}: {type(exc).__name__}: {exc}"
    return ""


def serve(name: str) -> None:
    """Preload, then fork each request, until the parent (run.sh) is gone. Blocks."""
    failed = preload()
    if failed:
        print(f"preloaded up to {failed} (each command imports the rest)", flush=True)
    # A forked child would hold a copy of a Python thread's locks, never released. (torch's
    # import leaves one idle native thread, which every psgd launcher forks beside as well.)
    if threading.active_count() != 1:
        raise SystemExit(f"preloading started {threading.active_count() - 1} Python thread(s): forking is not safe")
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(name))
    listener.listen(64)
    print(f"preloaded in {time.process_time():.1f} s of CPU; serving {name!r}", flush=True)
    running: dict[int, socket.socket] = {}  # pid -> its client's connection
    kill_at: dict[int, float] = {}  # pid -> when SIGKILL follows the SIGTERM (its client went away)
    while os.getppid() == parent:
        watched = [listener, *(c for p, c in running.items() if p not in kill_at)]
        for ready in select.select(watched, [], [], 0.05)[0]:
            if ready is listener:
                _accept(listener, running)
            else:  # readable before its command ended: the client closed it
                pid = next(p for p, c in running.items() if c is ready)
                _signal(pid, signal.SIGTERM)
                kill_at[pid] = time.monotonic() + KILL_AFTER_S
        for pid, at in list(kill_at.items()):
            if time.monotonic() >= at:
                _signal(pid, signal.SIGKILL)
                del kill_at[pid]
        _reap(running, kill_at)


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the command's session: its own children too
    except ProcessLookupError:
        pass


def _accept(listener: socket.socket, running: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():  # an abstract socket has no file permissions: refuse other users here
        conn.close()
        return
    payload, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(json.loads(payload), fds, [listener, conn, *running.values()])
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    running[pid] = conn


def _reap(running: dict[int, socket.socket], kill_at: dict[int, float]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        kill_at.pop(pid, None)
        conn = running.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass  # the client is gone: nobody to tell
            conn.close()


def _child(request: dict, fds: list[int], sockets: list[socket.socket]) -> None:
    """The forked command: `python ARGV` from here on; never returns into the server."""
    code = 1
    try:
        for s in sockets:
            s.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = 0
        _run_as_python(request["argv"])
    except SystemExit as exc:
        code = _exit_status(exc)
    except BaseException:  # noqa: BLE001 - on stderr, as an uncaught exception is
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()  # as an interpreter exiting does
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _run_as_python(argv: list[str]) -> None:
    """What `python ARGV` runs, with the sys.argv and sys.path[0] it would see."""
    if argv[:1] == ["-m"] and len(argv) > 1:
        sys.path[0] = os.getcwd()
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file first
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")  # sys.argv[0] as given, as python keeps it


def _exit_status(exc: SystemExit) -> int:
    """An interpreter's exit status for `exc`: its code, 0 for None, 1 (printed) otherwise."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


# ---- the clients -----------------------------------------------------------------------------

def _start(name: str, argv: list[str], cwd: str, fds: list[int]):
    """Ask the server to fork `python ARGV` with these stdin/stdout/stderr: (the answer's
    lines, the command's pid)."""
    if not argv or argv == ["-m"] or (argv[0].startswith("-") and argv[0] != "-m"):
        raise ValueError(f"preloaded.py runs `SCRIPT ARGS` or `-m MODULE ARGS`, not {' '.join(argv)!r}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(_address(name))
    request = {"argv": argv, "cwd": cwd, "env": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(request).encode()], fds)
    answer = sock.makefile("r")
    sock.close()  # the file holds the connection
    return answer, int(answer.readline())


def _exit_code(answer) -> int:
    line = answer.readline()  # blocks until the command ends
    answer.close()
    return int(line) if line.strip() else -signal.SIGKILL  # the server died, and its commands with it


def capture(name: str, argv: list[str], cwd) -> subprocess.CompletedProcess:
    """`subprocess.run([python, *argv], capture_output=True, text=True, cwd=cwd)`, forked by
    the server `name`. Blocks until the command ends and its output is read."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        answer, _ = _start(name, argv, str(cwd), [null, out_w, err_w])
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    reading = set(chunks)
    while reading:  # both pipes to their end (every writer closed), as communicate() reads them
        for fd in select.select(list(reading), [], [])[0]:
            data = os.read(fd, 1 << 16)
            if data:
                chunks[fd].append(data)
            else:
                reading.discard(fd)
                os.close(fd)
    text = {fd: b"".join(parts).decode(errors="replace") for fd, parts in chunks.items()}
    return subprocess.CompletedProcess([sys.executable, *argv], _exit_code(answer), text[out_r], text[err_r])


def run(name: str, argv: list[str]) -> int:
    """`python ARGV` with this process's stdio, forked by the server; SIGTERM and SIGINT are
    passed on to it. Returns its exit status as a shell reports it (128 + N for signal N)."""
    answer, pid = _start(name, argv, os.getcwd(), [0, 1, 2])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _: _signal(pid, s))
    code = _exit_code(answer)
    return 128 - code if code < 0 else code


def wait(name: str, server_pid: int, timeout: float = START_TIMEOUT_S) -> int:
    """0 once the server answers; 1 (said on stderr) if it ended first or took too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            print(f"preloaded.py: the server {name!r} ended before it answered", file=sys.stderr)
            return 1
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(_address(name))
            return 0
        except ConnectionRefusedError:
            time.sleep(0.05)
        finally:
            probe.close()
    print(f"preloaded.py: the server {name!r} did not answer in {timeout:.0f} s", file=sys.stderr)
    return 1


def main(args: list[str]) -> int:
    usage = "usage: preloaded.py serve NAME | wait NAME PID | run NAME ARGV..."
    if len(args) < 2 or args[0] not in ("serve", "wait", "run"):
        print(usage, file=sys.stderr)
        return 2
    if args[0] == "serve" and len(args) == 2:
        serve(args[1])
        return 0
    if args[0] == "wait" and len(args) == 3 and args[2].isdigit():
        return wait(args[1], int(args[2]))
    if args[0] == "run" and len(args) > 2:
        try:
            return run(args[1], args[2:])
        except (ValueError, OSError) as exc:
            print(f"preloaded.py: {exc}", file=sys.stderr)
            return 1
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
