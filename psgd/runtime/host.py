"""Which host a process runs on, how many cores it may use and the CPU it has spent: a run
records the first two in its roles' ready events, so a later reader (psgd sim calibrate, on
another machine) judges the run's CPU load against the run's own hosts, not its own; and each
role's CPU while it trained in its last event, which the simulator's charges are checked against."""
from __future__ import annotations

import os
import resource
import socket
import time
from dataclasses import dataclass, field

__all__ = ["host_fields", "usable_cores", "CpuMeter", "LoopCpu", "LOOP_PHASES"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def host_fields() -> dict:
    """The fields a role's ready event carries about its host."""
    return {"host": socket.gethostname(), "cores": usable_cores()}


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread's (ZeroMQ's I/O, the heartbeats)
    return usage.ru_utime, usage.ru_stime


@dataclass
class CpuMeter:
    """The CPU this process spends from its creation (or `restart`): user and system seconds,
    every thread's. Wall time would count other processes' turns on shared cores; CPU time does not."""
    start: tuple[float, float] = field(default_factory=_cpu)

    def restart(self) -> None:
        self.start = _cpu()

    def fields(self) -> dict:
        """`cpu_s` (user + system) and `sys_s` (system: the kernel's sockets, wake-ups, copies) since the start."""
        user, system = (now - then for now, then in zip(_cpu(), self.start))
        return {"cpu_s": round(user + system, 4), "sys_s": round(system, 4)}


# A worker step's phases, in order: the step (its batch, zero_grad, forward and backward, the device
# wait), its exchange (the gradients flattened, pushed and the parameters loaded: psgd.Optimizer.step)
# and the loop around them (the step's event, the loop's checks).
LOOP_PHASES = ("step", "exchange", "loop")


class LoopCpu:
    """The training thread's CPU (time.thread_time) by phase of its loop: `mark(phase)` ends the span
    since the previous mark and charges it to `phase`. Other threads' CPU (ZeroMQ's I/O, heartbeats)
    is the process's (CpuMeter) less these. Not thread-safe: the loop's own thread calls it."""

    def __init__(self):
        self.spent = dict.fromkeys(LOOP_PHASES, 0.0)
        self.last = time.thread_time()

    def mark(self, phase: str) -> None:
        now = time.thread_time()
        self.spent[phase] += now - self.last
        self.last = now

    def fields(self) -> dict:
        """`step_cpu_s`, `exchange_cpu_s`, `loop_cpu_s`: the training thread's CPU in each phase."""
        return {f"{phase}_cpu_s": round(s, 6) for phase, s in self.spent.items()}
