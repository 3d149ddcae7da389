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

# Lines torch prints after a CUDA error's message: advice, never the cause.
_TORCH_HINTS = ("Compile with `TORCH_USE_CUDA_DSA`", "For debugging consider passing CUDA_LAUNCH_BLOCKING",
                "CUDA kernel errors might be asynchronously reported", "Search for `cuda")

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
        lines = [ln for ln in lines if not ln.startswith(_TORCH_HINTS)] or lines
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
    (`child_main`, from the CLI); macOS: fork and torch do not mix; and CUDA does not survive
    fork(): once this process has initialised the driver, a forked child fails at its first
    CUDA call ("initialization error", seen on an H200). torch.cuda.is_initialized() misses
    the driver being initialised by a mere device query, so a run whose workers train on the
    GPU execs every child, whatever this process has touched."""
    if cfg.run.start_method != "fork" or child_main is None or not sys.platform.startswith("linux"):
        return False
    torch = sys.modules.get("torch")
    if torch is None:
        return True
    if torch.cuda.is_initialized() or cfg.workers.device == "cuda":
        return False
    return not (cfg.workers.device == "auto" and torch.cuda.is_available())


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
