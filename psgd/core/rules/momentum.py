"""`optimizer.name: momentum`: SGD whose momentum defaults to 0.9
(OptimizerConfig.effective_momentum); torch's SGD maps back to `sgd`."""
from __future__ import annotations

from psgd.core.rules.base import rule
from psgd.core.rules.sgd import SGD


@rule
class Momentum(SGD):
    name = "momentum"
    torch_class = None
