"""The update-rule contract: one class per optimizer, in one table checked as
each class is added.

A rule says which `optimizer.name` it is, the torch.optim class it follows (and
so maps to and from), which settings decide its arithmetic, the flat state it
keeps, and its step. `@rule` refuses a class that lacks any of these, so a rule
with a missing part fails at import. What wraps every rule (schedules,
staleness-aware steps, DC-ASGD, weight decay) lives in psgd.core.update_rules.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Iterable, Optional

import torch

from psgd.config import OptimizerConfig

__all__ = ["Rule", "RULES", "rule", "UnsupportedOptimizer"]


class UnsupportedOptimizer(ValueError):
    """The torch optimizer (or one of its settings) has no exact psgd server rule."""


def require(group: dict, key: str, allowed, why: str) -> None:
    """Refuse a torch setting the rule cannot reproduce exactly, naming it."""
    if group.get(key, allowed) != allowed:
        raise UnsupportedOptimizer(f"{key}={group[key]!r} is not supported: {why}")


class Rule(ABC):
    """One optimizer's step on a shard's flat parameters. Subclasses set every
    class attribute below and implement the abstract methods; `@rule` checks both."""

    name: ClassVar[str]                     # the `optimizer.name` value
    family: ClassVar[str]                   # rules of one family share arithmetic (momentum is sgd)
    torch_class: ClassVar[Optional[type]]   # the torch.optim class it follows; None: reached via its family
    keys: ClassVar[tuple[str, ...]]         # the OptimizerConfig settings that decide its arithmetic
    decoupled_weight_decay: ClassVar[bool]  # weight decay shrinks the parameters (AdamW), else joins the gradient

    def __init__(self, cfg: OptimizerConfig, params: torch.Tensor):
        self.cfg = cfg
        self.state: dict[str, torch.Tensor] = self.initial_state(cfg, params)

    @abstractmethod
    def initial_state(self, cfg: OptimizerConfig, params: torch.Tensor) -> dict[str, torch.Tensor]:
        """The flat tensors the rule keeps (checkpointed by name)."""

    @abstractmethod
    def step(self, params: torch.Tensor, grad: torch.Tensor, lr: float, update: int) -> None:
        """Apply `grad` to `params` in place at rate `lr`; `update` counts the updates before it."""

    @abstractmethod
    def magnitudes(self, bound: dict[str, float], grad: float, lr: float, update: int) -> dict[str, float]:
        """Upper bounds on the absolute values `step` can produce, from upper bounds on the
        inputs: `bound` holds |params| (key "") and each state entry, `grad` bounds |grad|.
        Returns the bounds after the step for "" and every state entry, plus any intermediate
        value the step computes (under a name of its own), so that a caller can tell that no
        value can leave float32's range without running the step (UpdateRule.apply_if_finite)."""

    @classmethod
    def settings(cls, cfg: OptimizerConfig) -> dict:
        """The values of `keys` in `cfg`, which decide the rule's arithmetic, under the
        names torch.optim gives them: the momentum in force, betas as a list."""
        values = {"momentum": cfg.effective_momentum, "betas": list(cfg.betas)}
        return {k: values.get(k, getattr(cfg, k)) for k in cls.keys}

    @classmethod
    def torch_optimizer(cls, cfg: OptimizerConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """torch.optim's twin of this rule (a worker's inner optimizer under local updates):
        its torch class (its family's, for a rule reached through it) with its `settings`."""
        torch_class = cls.torch_class or RULES[cls.family].torch_class
        return torch_class(list(params), **{k: tuple(v) if isinstance(v, list) else v
                                            for k, v in cls.settings(cfg).items()})

    @classmethod
    @abstractmethod
    def from_torch(cls, group: dict) -> dict:
        """OptimizerConfig fields for a torch optimizer's (single) parameter group;
        UnsupportedOptimizer for a setting the rule cannot reproduce."""

    def sparse_exact(self) -> bool:
        """Whether a sparse gradient changes only its own coordinates under this rule."""
        return False


# optimizer.name -> rule class; filled by @rule as each member module is imported.
RULES: dict[str, type[Rule]] = {}

_ATTRIBUTES = {"name": str, "family": str, "keys": tuple, "decoupled_weight_decay": bool}


def rule(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add `cls` to RULES after checking it has every part."""
    if not (isinstance(cls, type) and issubclass(cls, Rule)):
        raise TypeError(f"{cls!r} is not a Rule subclass")
    for attr, kind in _ATTRIBUTES.items():
        value = getattr(cls, attr, None)
        if not isinstance(value, kind) or not value and kind is not bool:
            raise TypeError(f"update rule {cls.__name__} lacks {attr} (a {kind.__name__})")
    torch_class = getattr(cls, "torch_class", False)
    if torch_class is not None and not (isinstance(torch_class, type) and issubclass(torch_class, torch.optim.Optimizer)):
        raise TypeError(f"update rule {cls.__name__} lacks torch_class (a torch.optim class, or None)")
    if torch_class is None and getattr(RULES.get(cls.family), "torch_class", None) is None:
        raise TypeError(f"update rule {cls.__name__} lacks torch_class (None only where its family "
                        f"{cls.family!r} has a rule with one)")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"update rule {cls.__name__} lacks {', '.join(missing)}")
    unknown = [k for k in cls.keys if k not in OptimizerConfig.__dataclass_fields__]
    if unknown:
        raise TypeError(f"update rule {cls.__name__}: keys {unknown} are not optimizer settings")
    if cls.name in RULES and RULES[cls.name] is not cls:
        raise TypeError(f"update rule {cls.__name__} reuses the name {cls.name!r} of {RULES[cls.name].__name__}")
    RULES[cls.name] = cls
    return cls
