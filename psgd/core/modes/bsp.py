"""BSP: the pushes of one clock are summed and applied once, as their mean, when
the quorum is in (less `backup_workers`: Chen et al. 2016); a pull at clock c
waits until every clock below c has been applied."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from psgd.config.modes import Mode
from psgd.core.clocks import ClockBoard
from psgd.core.modes.base import Counted, ModeBehaviour, PushAction, Update
from psgd.core.modes.bsp_rounds import BspAggregator, PushOutcome

if TYPE_CHECKING:
    import torch

__all__ = ["Bsp"]


class Bsp(ModeBehaviour):
    MODE = Mode.BSP
    BOUNDED = False

    def __init__(self, board: ClockBoard, numel: int, backup_workers: int = 0):
        super().__init__(board, numel, backup_workers)
        self.aggregator = BspAggregator(numel, backup_workers)
        self._staleness: list[int] = []  # of the gradients summed for the clock in progress

    @property
    def step(self) -> int:
        """The clock being aggregated: every clock below it has been applied."""
        return self.aggregator.step

    def pull_ready(self, clock: int, staleness: int) -> bool:
        return self.aggregator.step >= clock

    def push_action(self, staleness: int, max_staleness_drop: Optional[int]) -> PushAction:
        return PushAction.AGGREGATE  # an averaged step is never too stale: every gradient read the last one

    def count(self, rank: int, clock: int, grad: Optional[torch.Tensor], staleness: int,
              weight: float = 1.0) -> Counted:
        if self.aggregator.add(rank, clock, grad, self.board.quorum()) is PushOutcome.LATE:
            # A straggler whose clock was already applied continues from the
            # step in progress instead of staying behind forever.
            self.board.skip_to(rank, self.aggregator.step + int(self.aggregator.contributed(rank)))
            return Counted(late=True)
        if grad is not None:
            self._staleness.append(staleness)
        return Counted()

    def due(self) -> Optional[Update]:
        """The clock's mean, once enough of the quorum has pushed for it."""
        if self.aggregator.check(self.board.quorum()) is not PushOutcome.COMPLETE:
            return None
        staleness, self._staleness = self._staleness, []
        return Update(self.aggregator.take_average(), staleness)

    def join_clock(self) -> Optional[int]:
        return self.aggregator.step

    def lr_clock(self, clock: int) -> int:
        return self.aggregator.step

    def push_refusal(self, clock: int) -> Optional[str]:
        if clock > self.aggregator.step:
            return f"BSP push for clock {clock} while the shard is at step {self.aggregator.step}"
        return None

    def progress(self) -> int:
        return self.aggregator.step

    def state_dict(self) -> Optional[dict]:
        return self.aggregator.state_dict()

    def load_state_dict(self, sd: Optional[dict]) -> None:
        if sd is not None:
            self.aggregator.load_state_dict(sd)
