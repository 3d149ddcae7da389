"""How many training examples one model update carries: the unit that lets runs of
different modes be compared per example processed."""
from __future__ import annotations

from psgd.config.modes import Mode

__all__ = ["examples_per_update"]


def examples_per_update(mode: Mode, workers: int, batch_size: int, backup_workers: int = 0,
                        local_steps: int = 0) -> int:
    """A BSP/all-reduce update averages the gradients of W - b workers; an SSP/ASP
    update applies one. Under local updates each of those carries a round of
    `local_steps` steps."""
    rounds = max(1, local_steps)
    if Mode(mode).synchronous:
        return batch_size * (workers - backup_workers) * rounds
    return batch_size * rounds
