"""DiLoCo (Douillard et al. 2023): local SGD whose outer step has momentum
(Nesterov in the paper: outer_lr 0.7, momentum 0.9)."""
from __future__ import annotations

from psgd.core.local_methods.base import local_method
from psgd.core.local_methods.local_sgd import LocalSGD


@local_method
class DiLoCo(LocalSGD):
    word = "diloco"
    name = "DiLoCo"
