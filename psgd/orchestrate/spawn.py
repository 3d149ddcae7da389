"""Starting and stopping one child process of a local run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from psgd.config import Config
from psgd.orchestrate.roles import child_command
from psgd.orchestrate.states import ChildState
from psgd.runtime.events import EventTail
from psgd.runtime.lifeline import LAUNCHER_PID_ENV

__all__ = ["Child", "spawn_child", "fork_allowed", "terminate", "kill"]


@dataclass
class Child:
    role: str
    index: int
    proc: subprocess.Popen
    log: Path
    events: EventTail
    address: Optional[str] = None
    state: ChildState = ChildState.STARTING

    def cause(self) -> str:
        """The last meaningful line the child printed (usually the exception)."""
        try:
            lines = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except FileNotFoundError:
            return "no output"
        return lines[-1][:300] if lines else "no output"

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (pid {self.proc.pid})"

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def read_events(self) -> list[dict]:
        return self.events.read()

    def terminate(self) -> None:
        terminate(self.proc)


def fork_allowed(cfg: Config, child_main: Optional[Callable[[list[str]], int]]) -> bool:
    """Whether a child may be forked rather than exec'd. Forking needs the command's entry
    (`child_main`, from the CLI); macOS: fork and torch do not mix; and a CUDA context does
    not survive fork(): once this process has used the GPU (`psgd doctor` reading the
    device's properties, a user's script around psgd.launch), a forked child would fail at
    its first CUDA call, so children are exec'd."""
    torch = sys.modules.get("torch")
    cuda_used = torch is not None and torch.cuda.is_initialized()
    return cfg.run.start_method == "fork" and child_main is not None and sys.platform.startswith("linux") \
        and not cuda_used


def spawn_child(cfg: Config, role: str, index: int, run_dir: Path, address: Optional[str] = None,
                child_main: Optional[Callable[[list[str]], int]] = None) -> Child:
    """Start `role` `index` on the run's config.yaml, its output going to logs/ROLE-I.log."""
    (run_dir / "logs").mkdir(exist_ok=True)
    log = run_dir / "logs" / f"{role}-{index}.log"
    # LAUNCHER_PID_ENV: the child dies with this process (runtime/lifeline.py).
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(cfg.run.threads),
               MKL_NUM_THREADS=str(cfg.run.threads), **{LAUNCHER_PID_ENV: str(os.getpid())})
    command = child_command(role, index, run_dir)
    if fork_allowed(cfg, child_main):
        from psgd.orchestrate.fork import fork_child, preload
        preload(cfg)  # imported once here; every forked child starts with it
        proc = fork_child(child_main, command[3:], log, env)  # the arguments after `python -m psgd.cli`
    else:
        with open(log, "ab") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    # Earlier incarnations' events were merged already: read only what this one writes.
    events = EventTail(run_dir / "events" / f"{role}-{index}.jsonl", from_end=True)
    return Child(role, index, proc, log, events, address=address)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children run in their own session: pgid == pid
    except ProcessLookupError:
        pass
    proc.wait()


def terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
