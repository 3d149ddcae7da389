"""The eager outer step (after Kale et al. 2025, arXiv 2502.12996): a worker pushes
its round's delta and begins its next round at once, from the newest parameters it
has minus its own delta; the round's outer update folds in one round later, when
its reply is collected (psgd.workers.eager). The outer rule is that of the method the
outer `local:` settings give (local SGD, DiLoCo or async DiLoCo)."""
from __future__ import annotations

from psgd.config import Config, OptimizerConfig
from psgd.config.local_updates import outer_word
from psgd.core.local_methods.base import LOCAL_METHODS, LocalMethod, Schedule, local_method


@local_method
class Eager(LocalMethod):
    word = "eager"
    name = "eager DiLoCo"
    schedule = Schedule.EAGER

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.outer = LOCAL_METHODS[outer_word(cfg.local)](cfg)

    def outer_rule(self, optimizer: OptimizerConfig, live: bool) -> OptimizerConfig:
        return self.outer.outer_rule(optimizer, live)
