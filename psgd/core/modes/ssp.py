"""SSP (Ho et al. 2013): pushes apply on arrival; a pull at clock c waits until
the slowest quorum worker's clock is at least c - staleness."""
from __future__ import annotations

from psgd.config.modes import Mode
from psgd.core.modes.base import ApplyOnArrival

__all__ = ["Ssp"]


class Ssp(ApplyOnArrival):
    MODE = Mode.SSP
    BOUNDED = True

    def pull_ready(self, clock: int, staleness: int) -> bool:
        low = self.board.min_clock()
        return low is None or low >= clock - staleness
