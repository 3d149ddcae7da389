"""DyLU (Liu et al. 2024): a worker whose steps take k times the fastest worker's
takes steps / k steps per round (at least one), so that slow and fast workers'
rounds last about as long. The outer rule is that of the method the other
`local:` settings select (local SGD, DiLoCo or async DiLoCo)."""
from __future__ import annotations

import dataclasses
import math

from psgd.config import OptimizerConfig
from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod, local_method


@local_method
class DyLU(LocalMethod):
    name = "DyLU"
    paced = True

    def __init__(self, local: LocalConfig, workers: int):
        super().__init__(local, workers)
        fixed = dataclasses.replace(local, dynamic=False)
        self.outer = next(m for m in LOCAL_METHODS.values() if m is not DyLU and m.selects(fixed))(fixed, workers)

    @classmethod
    def selects(cls, local: LocalConfig) -> bool:
        return local.dynamic

    def outer_rule(self, optimizer: OptimizerConfig, live: bool) -> OptimizerConfig:
        return self.outer.outer_rule(optimizer, live)

    def round_steps(self, own_step_s: float, fastest_step_s: float) -> int:
        """Without both times, the nominal count."""
        nominal = self.local.steps
        if not (0 < own_step_s < math.inf and 0 < fastest_step_s < math.inf):
            return nominal
        ratio = fastest_step_s / own_step_s
        return max(1, min(nominal, int(nominal * ratio + 0.5)))
