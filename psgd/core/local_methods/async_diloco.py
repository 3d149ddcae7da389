"""Asynchronous DiLoCo with Delayed Nesterov (Liu et al. 2024): each delta is
applied on arrival at outer_lr / workers, and the outer momentum moves once per
`workers` deltas, on their mean (psgd.core.rules.sgd applies that period)."""
from __future__ import annotations

from psgd.core.local_methods.base import local_method
from psgd.core.local_methods.diloco import DiLoCo


@local_method
class AsyncDiLoCo(DiLoCo):
    word = "async_diloco"
    name = "async DiLoCo (Delayed Nesterov)"

    def momentum_period(self) -> int:
        return self.workers

    def push_share(self, live: bool) -> float:
        return 1.0  # the rule applies each delta at lr / period by itself
