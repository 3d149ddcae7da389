"""Local SGD (and, under asp, GEO-SGD): H inner steps, then the delta, applied by
an outer SGD step at outer_lr without momentum (outer_lr 1: the plain average)."""
from __future__ import annotations

from psgd.config.local_updates import LocalConfig
from psgd.core.local_methods.base import LocalMethod, local_method


@local_method
class LocalSGD(LocalMethod):
    name = "local SGD"

    @classmethod
    def selects(cls, local: LocalConfig) -> bool:
        return local.outer_momentum == 0 and not local.dynamic and not local.fragments
