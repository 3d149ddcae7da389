"""Restart policy: which crashed processes come back, when,
and when to give up.

Each process (role, index) may be restarted `supervision.max_restarts` times.
A restart waits `backoff_s * 2**k`, k counting the restarts of that process
since it last ran healthily: a process that crashes at once does not spin,
and one that ran `backoff_reset_s` or longer since its last restart before it
crashed starts again from `backoff_s` (a storm of kills spread over a long run
does not pay ever longer waits). A worker's restart that would fall due at or
after the end of training (train.max_time_s) is not made: the run would stop
it at once. Pure bookkeeping: the launcher (and the virtual cluster's failure
model, psgd.sim.faults) does the spawning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from psgd.config import SupervisionConfig
from psgd.config.modes import Role

__all__ = ["RestartBudget", "PendingRestart", "RESTARTABLE_ROLES", "after_training"]

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
        self._streak: dict[tuple[str, int], int] = {}      # restarts since the process last ran healthily
        self._restarted: dict[tuple[str, int], float] = {}  # when its latest restart fell due

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def used(self, role: str, index: int) -> int:
        return self.counts.get((role, index), 0)

    def delay_s(self, role: str, index: int, now: float) -> float:
        """How long a restart of (role, index) booked at `now` would wait."""
        return self.cfg.backoff_s * 2 ** self._streak_at((role, index), now)

    def _streak_at(self, key: tuple[str, int], now: float) -> int:
        since = self._restarted.get(key)
        healthy = since is None or now - since >= self.cfg.backoff_reset_s
        return 0 if healthy else self._streak.get(key, 0)

    def schedule(self, role: str, index: int, now: float, address: Optional[str] = None) -> Optional[PendingRestart]:
        """Book a restart of (role, index), or return None once it has used its budget."""
        key = (role, index)
        k = self.used(role, index)
        if role not in RESTARTABLE_ROLES or k >= self.cfg.max_restarts:
            return None
        streak = self._streak_at(key, now)
        due = now + self.cfg.backoff_s * 2 ** streak
        self.counts[key] = k + 1
        self._streak[key] = streak + 1
        self._restarted[key] = due
        return PendingRestart(due, role, index, address)


def after_training(role: str, due: float, training_ends: Optional[float]) -> bool:
    """Whether a restart of `role` due at `due` is a worker's that falls due at or after
    `training_ends` (the same clock; None: training has not started): it is not made."""
    return role == Role.WORKER and training_ends is not None and due >= training_ends
