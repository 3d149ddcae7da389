"""DiLoCo (Douillard et al. 2023): local SGD whose outer step has momentum
(Nesterov in the paper: outer_lr 0.7, momentum 0.9)."""
from __future__ import annotations

from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods.base import local_method
from psgd.core.local_methods.local_sgd import LocalSGD


@local_method
class DiLoCo(LocalSGD):
    name = "DiLoCo"

    @classmethod
    def selects(cls, local: LocalConfig) -> bool:
        return (local.outer_momentum > 0 and not local.delayed_nesterov and not local.dynamic
                and not local.fragments)
