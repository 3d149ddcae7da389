"""When a fault storm kills whom: one plan for `psgd bench faults` on the real launcher
and for the virtual cluster's failure model (psgd.sim.faults), so both runs of a
comparison are killed at the same run times."""
from __future__ import annotations

from typing import Sequence

__all__ = ["kill_schedule", "restarts_needed", "RESTART_MARGIN_S"]

# No kill this close to train.max_time_s: the restart it causes must be back before the
# launcher stops the workers (a respawn after the stop would train on past the time limit).
RESTART_MARGIN_S = 5.0


def kill_schedule(every_s: float, max_time_s: float, targets: int, backoff_s: float = 0.0) -> list[tuple[float, int]]:
    """(run time, index) of each planned kill: one every `every_s` from `every_s` on, the
    targets in turn (0, 1, ..., targets - 1, 0, ...). A kill is left out when the restart it
    causes would not be due RESTART_MARGIN_S before the end, even at the longest backoff
    the launcher could apply (backoff_s * 2**k before a process's k-th restart,
    supervision.backoff_s)."""
    if not every_s > 0:
        raise ValueError(f"--kill-every-s must be > 0, got {every_s}")
    if targets < 1:
        raise ValueError("no process of the target role to kill")
    plan: list[tuple[float, int]] = []
    killed: dict[int, int] = {}
    k = 1
    while k * every_s < max_time_s - RESTART_MARGIN_S:
        t, index = k * every_s, (k - 1) % targets
        if t + backoff_s * 2 ** killed.get(index, 0) < max_time_s - RESTART_MARGIN_S:
            plan.append((t, index))
            killed[index] = killed.get(index, 0) + 1
        k += 1
    return plan


def restarts_needed(plan: Sequence[tuple[float, int]]) -> int:
    """The most kills any one process gets: supervision.max_restarts must allow that many."""
    per: dict[int, int] = {}
    for _, index in plan:
        per[index] = per.get(index, 0) + 1
    return max(per.values(), default=0)
