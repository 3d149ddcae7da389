"""The local-update method contract: one class per method, with its hooks, in a
table checked as each class is added (in the spirit of torchft's
`DiLoCo(LocalSGD)`: a method subclasses the one it extends and overrides what differs).

Hooks: which `local:` settings select the method (`selects`), the shards' outer
rule for the workers' deltas (`outer_rule`, built from `momentum_period` and
`push_share`), and how many inner steps a worker's next round takes
(`round_steps`). Exactly one method selects any valid `local:` section; the
registry checks that at import.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import ClassVar

from psgd.config import OptimizerConfig, ScheduleConfig
from psgd.config.local_updates import LocalConfig

__all__ = ["LocalMethod", "LOCAL_METHODS", "local_method"]


class LocalMethod(ABC):
    """What every local-update method does: H inner steps, then one delta
    (start - end) that the shards apply with an outer SGD rule."""

    name: ClassVar[str]  # how reports and errors call it
    paced: ClassVar[bool] = False  # its rounds follow the fastest worker's time per step (DyLU)

    def __init__(self, local: LocalConfig, workers: int):
        self.local = local
        self.workers = workers

    @classmethod
    @abstractmethod
    def selects(cls, local: LocalConfig) -> bool:
        """Whether these `local:` settings (with steps > 0) mean this method."""

    def momentum_period(self) -> int:
        """Updates per move of the outer momentum (1: every delta moves it)."""
        return 1

    def push_share(self, live: bool) -> float:
        """The fraction of outer_lr one delta is applied at. The outer rate is for the
        mean of the workers' deltas, which BSP applies once a round; under ssp/asp
        (`live`) each delta is applied alone, so it takes its share, 1 / workers (as
        GEO-SGD does, Paddle's GeoCommunicator): the W deltas of a round then move the
        parameters as far as BSP's one step on their mean."""
        return 1.0 / self.workers if live else 1.0

    def outer_rule(self, optimizer: OptimizerConfig, live: bool) -> OptimizerConfig:
        """The shards' rule for deltas: SGD at local.outer_lr with the outer momentum. The
        optimizer section's server-side options (staleness_aware, max_staleness_drop) carry over."""
        local = self.local
        return dataclasses.replace(
            optimizer, name="sgd", lr=local.outer_lr, momentum=local.outer_momentum,
            nesterov=local.outer_nesterov or local.delayed_nesterov, weight_decay=0.0, lr_scaling="none",
            schedule=ScheduleConfig(), dc_asgd=None, momentum_period=self.momentum_period(),
            push_share=self.push_share(live))

    def round_steps(self, own_step_s: float, fastest_step_s: float) -> int:
        """Inner steps in a worker's next round, from its own and the fastest worker's
        time per step (0 where not known yet)."""
        return self.local.steps


# Method class name -> class; filled by @local_method as each member module is imported.
LOCAL_METHODS: dict[str, type[LocalMethod]] = {}


def local_method(cls: type[LocalMethod]) -> type[LocalMethod]:
    """Class decorator: add `cls` to LOCAL_METHODS after checking it has every part."""
    if not (isinstance(cls, type) and issubclass(cls, LocalMethod)):
        raise TypeError(f"{cls!r} is not a LocalMethod subclass")
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        raise TypeError(f"local method {cls.__name__} lacks name (a str)")
    if not isinstance(getattr(cls, "paced", None), bool):
        raise TypeError(f"local method {cls.__name__} lacks paced (a bool)")
    if "selects" not in cls.__dict__:  # inherited, it would select its parent's configs too
        raise TypeError(f"local method {cls.__name__} lacks selects (its own)")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"local method {cls.__name__} lacks {', '.join(missing)}")
    if any(other.name == cls.name and other is not cls for other in LOCAL_METHODS.values()):
        raise TypeError(f"local method {cls.__name__} reuses the name {cls.name!r}")
    LOCAL_METHODS[cls.__name__] = cls
    return cls
