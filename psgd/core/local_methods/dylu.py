"""DyLU (Liu et al. 2024): a worker whose steps take k times the fastest worker's
takes steps / k steps per round (at least one), so that slow and fast workers'
rounds last about as long. The outer rule is that of the method the outer
`local:` settings give (local SGD, DiLoCo or async DiLoCo: psgd.config.local_updates.outer_word)."""
from __future__ import annotations

import math

from psgd.config import Config, OptimizerConfig
from psgd.config.local_updates import outer_word
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod, local_method


@local_method
class DyLU(LocalMethod):
    word = "dylu"
    name = "DyLU"
    paced = True

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.outer = LOCAL_METHODS[outer_word(cfg.local)](cfg)

    def outer_rule(self, optimizer: OptimizerConfig, live: bool) -> OptimizerConfig:
        return self.outer.outer_rule(optimizer, live)

    def round_steps(self, own_step_s: float, fastest_step_s: float) -> int:
        """Without both times, the nominal count."""
        nominal = self.local.steps
        if not (0 < own_step_s < math.inf and 0 < fastest_step_s < math.inf):
            return nominal
        ratio = fastest_step_s / own_step_s
        return max(1, min(nominal, int(nominal * ratio + 0.5)))
