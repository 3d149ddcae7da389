"""How the supervisor (supervisor.py) stops a run's processes: in order when the job ends,
and at once, named, when one does not answer.

Every function is handed the ProcessHost the processes live on (processes.py) and
the processes concerned; none keeps state of its own.
"""
from __future__ import annotations

from typing import Callable, Optional

from psgd.config.modes import Role
from psgd.orchestrate.launchers import LaunchFailed
from psgd.orchestrate.processes import ProcessHost, RoleProcess

__all__ = ["ProcessesKilled", "STOP_GRACE_S", "INTERRUPT_BUDGET_S", "STOP_WORKERS_GRACE_S", "TIME_LIMIT_EXIT_CODE",
           "kill_frozen", "kill_stuck_workers", "stop_in_order"]

STOP_GRACE_S = 10.0
INTERRUPT_BUDGET_S = 4.0  # after SIGTERM/SIGINT, every child is gone within this
# Workers asked to stop at train.max_time_s (or at the target) that are still there this
# much later are killed (a frozen or hung worker), and the run ends with this exit code
# (timeout(1)'s) and status TIME_LIMIT: max_time_s bounds the run on every path.
STOP_WORKERS_GRACE_S = STOP_GRACE_S
TIME_LIMIT_EXIT_CODE = 124


class ProcessesKilled(Exception):
    """Processes killed for not answering: workers asked to stop at the time limit (or the
    target) still there after the grace, or a process of any role found frozen."""


def kill_stuck_workers(processes: ProcessHost, stuck: list[RoleProcess], why: str) -> None:
    """Kill workers that did not stop when asked (SIGKILL ends a stopped process too)
    and raise ProcessesKilled naming them (nothing when none is stuck)."""
    if not stuck:
        return
    names = [f"{c.name}{frozen_note(c)}" for c in stuck]
    processes.stop(stuck, 0.0)
    raise ProcessesKilled(f"{why}: {', '.join(names)} did not stop within {STOP_WORKERS_GRACE_S:g} s "
                          f"and {'was' if len(stuck) == 1 else 'were'} killed")


def kill_frozen(processes: ProcessHost, running: list[RoleProcess], limit_s: float) -> None:
    """A running process of any role whose heartbeat is older than `limit_s`
    (cluster.timeout_s) is frozen (SIGSTOP, a hung interpreter): kill it and raise
    ProcessesKilled naming it."""
    silent = processes.silent(running, limit_s)
    if not silent:
        return
    names = [f"{c.name}{frozen_note(c)} sent no heartbeat for {age:.1f} s" for c, age in silent]
    processes.stop([c for c, _ in silent], 0.0)
    raise ProcessesKilled(f"{'; '.join(names)} (cluster.timeout_s={limit_s:g}): "
                          f"{'it was' if len(silent) == 1 else 'they were'} killed")


def stop_in_order(processes: ProcessHost, children: list[RoleProcess], interrupted: bool,
                  record: Callable[[Optional[RoleProcess], dict], None]) -> list[RoleProcess]:
    """Stop in order: workers, then the evaluator (final eval + model.pt), then servers;
    `record` receives the events they wrote on the way out. Returns those killed for not
    stopping within their grace. When interrupted, everything must be gone within
    INTERRUPT_BUDGET_S: workers and evaluator are stopped together and stragglers are killed.
    When a shard is gone (killed as frozen, out of restarts), the final evaluation cannot
    read the model: the evaluator gets the interrupted grace, not three times STOP_GRACE_S."""
    if interrupted:
        stages = [((Role.WORKER, Role.ALLREDUCE, Role.EVALUATOR), 0.5 * INTERRUPT_BUDGET_S),
                  ((Role.SERVER,), 0.3 * INTERRUPT_BUDGET_S)]
    else:
        stages = [((Role.WORKER, Role.ALLREDUCE), STOP_GRACE_S), ((Role.EVALUATOR,), 3 * STOP_GRACE_S),
                  ((Role.SERVER,), STOP_GRACE_S)]
    killed: list[RoleProcess] = []
    for roles, grace in stages:
        if roles == (Role.EVALUATOR,) and _a_shard_is_gone(children):
            grace = 0.5 * INTERRUPT_BUDGET_S
        try:
            killed += processes.stop([c for c in children if c.role in roles], grace) or []
        except LaunchFailed:
            pass  # the host (Ray) is gone, and the processes with it
    try:
        processes.refresh(children)
    except LaunchFailed:
        pass
    for c in children:
        for e in c.read_events():
            record(c, e)
    processes.collect(children)
    return killed


def _a_shard_is_gone(children: list[RoleProcess]) -> bool:
    try:
        return any(c.role == Role.SERVER and c.poll() is not None for c in children)
    except LaunchFailed:
        return True  # the host (Ray) is gone, and the shards with it


def frozen_note(c: RoleProcess) -> str:
    """ ", frozen (stopped by a signal)" for a local child in state T: what the user will look for."""
    pid = getattr(getattr(c, "proc", None), "pid", None)
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, TypeError):
        return ""
    return ", frozen (stopped by a signal)" if state in ("T", "t") else ""
