"""ASP: every push is applied on arrival and pulls never wait."""
from __future__ import annotations

from psgd.config.modes import Mode
from psgd.core.modes.base import ApplyOnArrival

__all__ = ["Asp"]


class Asp(ApplyOnArrival):
    MODE = Mode.ASP
    BOUNDED = False

    def pull_ready(self, clock: int, staleness: int) -> bool:
        return True
