"""Local SGD (and, under asp, GEO-SGD): H inner steps, then the delta, applied by
an outer SGD step at outer_lr without momentum (outer_lr 1: the plain average)."""
from __future__ import annotations

from psgd.core.local_methods.base import LocalMethod, local_method


@local_method
class LocalSGD(LocalMethod):
    word = "local_sgd"
    name = "local SGD"
