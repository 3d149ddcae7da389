"""The local-update method contract: one class per method, with its hooks, in a
table checked as each class is added (in the spirit of torchft's
`DiLoCo(LocalSGD)`: a method subclasses the one it extends and overrides what differs).

`word` is the method's `local.method` value. Its hooks: the shards' outer rule for
the workers' deltas (`outer_rule`, built from `momentum_period` and `push_share`),
the worker's schedule (`schedule`: which worker-side rounds object runs it, and the
decisions that object asks the method for: `round_steps`, a fragment's `sends_after`),
and what a worker does to its delta before it leaves (`outgoing`). The real worker
(psgd.Optimizer) and the simulator's workers both build their rounds from
`schedule` and call the same hooks, so neither names a method.
"""
from __future__ import annotations

import dataclasses
from abc import ABC
from enum import Enum
from typing import ClassVar, Protocol, Sequence

import torch

from psgd.config import Config, OptimizerConfig, ScheduleConfig

__all__ = ["Codecs", "LocalMethod", "LOCAL_METHODS", "Schedule", "local_method"]


class Codecs(Protocol):
    """The run's codecs as a worker hands them to its method's `outgoing` (the wire sits above
    this layer: psgd.wire.codecs.registry.DeltaCodecs is the worker's)."""
    pushes: Sequence[str]  # each shard's `wire.compression` word for a delta

    def round_trip(self, compression: str, x: torch.Tensor) -> torch.Tensor:
        """`x` (flat fp32) as a shard receives it in `compression`, dense: encoded and decoded by
        a fresh codec (an empty residual)."""


class Schedule(str, Enum):
    """How a worker's rounds meet the shards (each has one worker-side class, psgd.workers.rounds):
    ROUNDS: after a round, the whole model's delta and a wait for the next start;
    FRAGMENTS: fragments of the model leave on a staggered schedule (streaming DiLoCo);
    EAGER: the round's delta leaves and the next round begins at once (its outer update folds in later)."""
    ROUNDS = "rounds"
    FRAGMENTS = "fragments"
    EAGER = "eager"


class LocalMethod(ABC):
    """What every local-update method does: H inner steps, then one delta
    (start - end) that the shards apply with an outer SGD rule."""

    word: ClassVar[str]  # its `local.method` value
    name: ClassVar[str]  # how reports and errors call it
    paced: ClassVar[bool] = False  # its rounds follow the fastest worker's time per step (DyLU)
    schedule: ClassVar[Schedule] = Schedule.ROUNDS

    def __init__(self, cfg: Config):
        """`cfg`: the run's config (a ConfigError here names a setting the method cannot run with)."""
        self.local = cfg.local
        self.workers = cfg.cluster.workers

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

    def outgoing(self, deltas: list[torch.Tensor], codecs: Codecs) -> list[torch.Tensor]:
        """What leaves for a round's delta, one flat fp32 tensor per shard (it may be changed
        in place); called once per delta, in order, on the object of the worker that made it."""
        return deltas

    def state_dict(self) -> dict:
        """What the method keeps per worker (resumed by `load_state_dict`)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Resume what `state_dict` saved (the base keeps nothing)."""
        return None


# Method word -> class; filled by @local_method as each member module is imported.
LOCAL_METHODS: dict[str, type[LocalMethod]] = {}


def local_method(cls: type[LocalMethod]) -> type[LocalMethod]:
    """Class decorator: add `cls` to LOCAL_METHODS after checking it has every part."""
    if not (isinstance(cls, type) and issubclass(cls, LocalMethod)):
        raise TypeError(f"{cls!r} is not a LocalMethod subclass")
    for part, kind in (("word", str), ("name", str), ("paced", bool), ("schedule", Schedule)):
        value = getattr(cls, part, None)
        if not isinstance(value, kind) or value == "":
            raise TypeError(f"local method {cls.__name__} lacks {part} (a {kind.__name__})")
    if "word" not in cls.__dict__:  # inherited, it would answer to its parent's word
        raise TypeError(f"local method {cls.__name__} lacks word (its own)")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"local method {cls.__name__} lacks {', '.join(missing)}")
    for other in LOCAL_METHODS.values():
        if other is not cls and (other.word == cls.word or other.name == cls.name):
            raise TypeError(f"local method {cls.__name__} reuses the word or name of {other.__name__}")
    LOCAL_METHODS[cls.word] = cls
    return cls
