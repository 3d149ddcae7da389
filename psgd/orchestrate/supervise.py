"""Restart policy for the launcher: which crashed processes come back, when,
and when to give up.

Each process (role, index) may be restarted `supervision.max_restarts` times;
the k-th restart waits `backoff_s * 2**k` seconds, so a process that crashes
at once does not spin. Pure bookkeeping: the launcher does the spawning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from psgd.config import SupervisionConfig

__all__ = ["RestartBudget", "PendingRestart", "RESTARTABLE_ROLES"]

# torch.distributed all-reduce workers cannot rejoin their process group, so only these come back.
RESTARTABLE_ROLES = ("server", "worker", "evaluator")


@dataclass(order=True)
class PendingRestart:
    due: float                                  # time.monotonic() at which to respawn
    role: str = field(compare=False)
    index: int = field(compare=False)
    address: Optional[str] = field(compare=False, default=None)


class RestartBudget:
    def __init__(self, cfg: SupervisionConfig):
        self.cfg = cfg
        self.counts: dict[tuple[str, int], int] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def used(self, role: str, index: int) -> int:
        return self.counts.get((role, index), 0)

    def schedule(self, role: str, index: int, now: float, address: Optional[str] = None) -> Optional[PendingRestart]:
        """Book a restart of (role, index), or return None once it has used its budget."""
        k = self.used(role, index)
        if role not in RESTARTABLE_ROLES or k >= self.cfg.max_restarts:
            return None
        self.counts[(role, index)] = k + 1
        return PendingRestart(now + self.cfg.backoff_s * 2 ** k, role, index, address)
