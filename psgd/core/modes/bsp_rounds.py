"""BSP aggregation: the gradients of one clock summed until the quorum is in (Chen et
al. 2016's backup workers: the first W - b complete the clock, later ones are late)."""
from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Collection, Optional

if TYPE_CHECKING:
    import torch

__all__ = ["BspAggregator", "PushOutcome"]


class PushOutcome(str, Enum):
    BUFFERED = "buffered"    # BSP: waiting for the rest of the clock's gradients
    COMPLETE = "complete"    # BSP: the clock's aggregate is ready to apply
    LATE = "late"            # BSP: the clock was already applied; gradient dropped


class BspAggregator:
    """Sums the gradients of the current clock; averages once the quorum is in.

    A clock completes when (quorum size - backup) members of the current
    quorum have pushed for it; later pushes for it are dropped as LATE (Chen
    et al. 2016). A gradient from a worker that has since left the quorum
    stays in the sum (it was computed on this clock's parameters) but does
    not count toward completion, so a departure never makes a quorum
    member's push arrive "late".
    """

    def __init__(self, numel: int, backup: int = 0, dtype: Optional[torch.dtype] = None):
        import torch  # here, not at the top: `psgd ctl` imports the mode classes and needs no torch
        self.step = 0
        self.backup = backup
        self.valid = 0  # contributions that carried a usable gradient
        self._sum = torch.zeros(numel, dtype=dtype or torch.float32)
        self._contributors: set[int] = set()

    def needed(self, quorum_size: int) -> int:
        return max(1, quorum_size - self.backup)

    @property
    def count(self) -> int:
        return len(self._contributors)

    def contributed(self, rank: int) -> bool:
        return rank in self._contributors

    def add(self, rank: int, clock: int, grad: Optional[torch.Tensor], quorum: Collection[int]) -> PushOutcome:
        """Count `rank`'s push for `clock`. grad=None counts the push toward the
        quorum without a gradient (it was rejected), so the clock still completes."""
        if clock < self.step or rank in self._contributors:
            return PushOutcome.LATE
        if clock > self.step:
            # Under BSP no worker can read parameters for a clock beyond the step.
            raise ValueError(f"gradient for clock {clock} while the shard is at step {self.step}")
        if grad is not None:
            self._sum.add_(grad)
            self.valid += 1
        self._contributors.add(rank)
        return self.check(quorum)

    def check(self, quorum: Collection[int]) -> PushOutcome:
        """COMPLETE once enough members of `quorum` have pushed for the current clock."""
        members = sum(1 for r in quorum if r in self._contributors)
        if members and members >= self.needed(len(quorum)):
            return PushOutcome.COMPLETE
        return PushOutcome.BUFFERED

    def take_average(self) -> Optional[torch.Tensor]:
        """The mean of the completed clock's valid gradients (None if it had
        none); advances to the next clock."""
        avg = self._sum / self.valid if self.valid else None
        self._sum.zero_()
        self._contributors.clear()
        self.valid = 0
        self.step += 1
        return avg

    def state_dict(self) -> dict:
        """The in-progress clock, for shard snapshots."""
        return {"step": self.step, "valid": self.valid, "sum": self._sum.clone(),
                "contributors": sorted(self._contributors)}

    def load_state_dict(self, sd: dict) -> None:
        self.step, self.valid = int(sd["step"]), int(sd["valid"])
        self._sum.copy_(sd["sum"])
        self._contributors = set(sd["contributors"])
