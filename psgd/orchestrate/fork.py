"""Starting a child of a local run by forking the launcher (`run.start_method: fork`).

Every child used to be a fresh `python -m psgd.cli ROLE ...` that imported
torch again: seconds per process, seven processes per quickstart, on shared
cores. The launcher has imported torch, psgd and the user's modules already
(pre-flight ran the model), so a forked child starts at once and runs the same
command entry with the same arguments as the exec'd one would (the caller
passes that entry in: the CLI hands over its own `main`, so this layer never
imports the CLI above it). The forked
process gets its own session and its output goes to its log file, as with
`subprocess.Popen(start_new_session=True)`; `ForkedProcess` offers the part of
Popen's interface the launcher uses. The launcher keeps torch to one thread
before it runs any tensor code, so no OpenMP thread pool exists at fork time.
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, NoReturn, Optional, Sequence

from psgd.config import Config

__all__ = ["ForkedProcess", "exit_status", "fork_child", "preload", "run_forked"]


class ForkedProcess:
    """A forked child, with the pid/poll/wait/send_signal of subprocess.Popen."""

    def __init__(self, pid: int, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: treat as gone
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def preload(cfg: Config) -> None:
    """Import what every role needs, once, in the launcher (children inherit it).
    Under local updates that includes what a worker's inner optimizer imports when
    it is built: torch.optim's first optimizer imports torch._dynamo lazily, seconds
    that a restarted worker would otherwise spend after the start, registered but
    not training. Building one here imports whatever the installed torch needs."""
    import torch

    import psgd.servers.shard  # noqa: F401
    import psgd.workers.evaluator  # noqa: F401
    import psgd.workers.worker  # noqa: F401
    if cfg.local.enabled:
        from psgd.core.local_methods.optimizers import inner_torch_optimizer
        inner_torch_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])


def fork_child(main: Callable[[list[str]], int], argv: list[str], log: Path, env: dict[str, str],
               close_fds: Sequence[int] = ()) -> ForkedProcess:
    """Fork a child that runs `main(argv)` (the `psgd` command's entry) with
    stdout/stderr appended to `log`; `close_fds`: the parent's descriptors the child
    must not hold (a server's listening socket)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pid = os.fork()
    if pid:
        os.close(log_fd)
        return ForkedProcess(pid, argv)

    def prepare() -> None:  # in the child, which never returns into the launcher
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        for fd in close_fds:
            os.close(fd)
        os.environ.update(env)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)  # not the launcher's handlers; the role installs its own
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)

    run_forked(main, argv, prepare)


def run_forked(main: Callable[[list[str]], int], argv: list[str], prepare: Callable[[], None],
               exit_handlers: bool = False) -> NoReturn:
    """The body of a forked child: `prepare()` (its session, descriptors, environment,
    signals), then `main(argv)` as `psgd ARGV`, and the process ends with main's exit
    code as an exec'd interpreter's would (SystemExit's code; 1 and the traceback on
    stderr for an uncaught exception). Never returns into the parent's code.
    `exit_handlers`: run the atexit handlers first, as an interpreter exiting does (the
    launcher's children skip them: they would run the launcher's own)."""
    code = 1
    try:
        prepare()
        sys.argv = ["psgd", *argv]  # what a user's code inspecting argv sees in an exec'd child too
        code = main(argv)
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException:  # noqa: BLE001 - reported on stderr, like an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        try:
            if exit_handlers:
                atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def exit_status(exc: SystemExit) -> int:
    """The status an interpreter exits with for `exc`: its code, 0 for None, and 1 (the
    message on stderr) for anything else."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1
