"""The contract every consistency mode meets, and the registry of modes.

A mode is one class (one file in this package) naming its `Mode` value and
deciding, for one shard, when a pull may be answered and what a push does.
Defining the class registers it; a class that lacks a required part is
refused where it is defined, and psgd.core.modes refuses to import while a
parameter-server `Mode` has no class.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Optional

from psgd.config.modes import Mode
from psgd.core.clocks import ClockBoard

if TYPE_CHECKING:  # `psgd ctl` reads the mode classes without loading torch
    import torch

__all__ = ["ModeBehaviour", "PushAction", "Counted", "Update", "BEHAVIOURS", "behaviour_class", "uncovered"]


class PushAction(str, Enum):
    AGGREGATE = "aggregate"      # counts toward the clock's averaged step (bsp)
    APPLY = "apply"              # applied on arrival (ssp, asp)
    DROP_STALE = "drop_stale"    # staleness above optimizer.max_staleness_drop: never applied


@dataclass(frozen=True)
class Update:
    """An aggregated step now due: the mean gradient (None when every push of the
    clock was rejected) and the staleness of each gradient in it."""
    grad: Optional[torch.Tensor]
    staleness: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Counted:
    """What counting a push toward its clock did."""
    late: bool = False                # the clock was already applied: the push is dropped
    carried: bool = False             # the clock was already merged: the push goes into the next (quorum)
    update: Optional[Update] = None   # an aggregated step the push completed


# Declared by every mode class (a class attribute), checked where the class is defined.
REQUIRED_FACTS = ("MODE", "BOUNDED")
# Implemented by every mode class, checked likewise.
REQUIRED_METHODS = ("pull_ready", "push_action", "count")

BEHAVIOURS: dict[Mode, type["ModeBehaviour"]] = {}


class ModeBehaviour(ABC):
    """One shard's rule for one mode. Socket-free and time-free: the consistency
    policy (psgd.core.modes.policy) calls it with clocks; the board is shared."""

    MODE: ClassVar[Mode]      # the config's value for this mode
    BOUNDED: ClassVar[bool]   # the staleness setting bounds its pulls (reported as the bound in force)

    def __init__(self, board: ClockBoard, numel: int, backup_workers: int = 0):
        self.board = board

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "MODE" not in cls.__dict__:  # a shared base of several modes, not a mode
            return
        missing = [name for name in REQUIRED_FACTS if not hasattr(cls, name)]
        missing += [name for name in REQUIRED_METHODS
                    if getattr(cls, name, None) is None or getattr(getattr(cls, name), "__isabstractmethod__", False)]
        if missing:
            raise TypeError(f"consistency mode {cls.__name__} lacks {', '.join(missing)}")
        mode = Mode(cls.MODE)
        if not mode.on_servers:
            raise TypeError(f"consistency mode {cls.__name__}: {mode} runs without parameter servers")
        if mode in BEHAVIOURS:
            raise TypeError(f"consistency mode {mode} has two classes: {BEHAVIOURS[mode].__name__} and {cls.__name__}")
        BEHAVIOURS[mode] = cls

    # ---- required ---------------------------------------------------------
    @abstractmethod
    def pull_ready(self, clock: int, staleness: int) -> bool:
        """May a pull at `clock` (already at least its rank's own clock) be answered
        now? `staleness`: the bound setting in force at that clock."""

    @abstractmethod
    def push_action(self, staleness: int, max_staleness_drop: Optional[int]) -> PushAction:
        """What a finite, first-seen push of this staleness does."""

    @abstractmethod
    def count(self, rank: int, clock: int, grad: Optional[torch.Tensor], staleness: int,
              weight: float = 1.0) -> Counted:
        """`rank`'s push for `clock` is done with (applied, kept for the aggregate or
        rejected: `grad` is the gradient to aggregate, else None). `weight`: the examples
        it carries (a rule that weights what it aggregates reads it)."""

    # ---- optional: the defaults are those of a mode that applies on arrival ----
    def join_clock(self) -> Optional[int]:
        """The clock a (re)joining worker continues from; None: the board's own rule."""
        return None

    def lr_clock(self, clock: int) -> int:
        """The clock whose learning rate a push of `clock` is applied with."""
        return clock

    def push_refusal(self, clock: int) -> Optional[str]:
        """Why a push for `clock` is impossible now (None: it is possible)."""
        return None

    def due(self) -> Optional[Update]:
        """An aggregated step now complete (after a push was counted, or a worker
        left the quorum the step waited for); None: none."""
        return None

    def progress(self) -> int:
        """Besides the slowest clock, what pull readiness depends on; never decreases."""
        return 0

    def state_dict(self) -> Optional[dict]:
        """State a restarted shard needs (None: none)."""
        return None

    def load_state_dict(self, sd: Optional[dict]) -> None:
        """Restore `state_dict()`'s value (a mode without state has none to restore)."""
        if sd is not None:
            raise ValueError(f"{self.MODE} keeps no state, the snapshot holds some: it was made in another mode")


class ApplyOnArrival(ModeBehaviour):
    """Shared by the modes that apply each push when it arrives (ssp, asp)."""

    def push_action(self, staleness: int, max_staleness_drop: Optional[int]) -> PushAction:
        if max_staleness_drop is not None and staleness > max_staleness_drop:
            return PushAction.DROP_STALE
        return PushAction.APPLY

    def count(self, rank: int, clock: int, grad: Optional[torch.Tensor], staleness: int,
              weight: float = 1.0) -> Counted:
        return _COUNTED  # frozen: one shared instance, not one built per push


_COUNTED = Counted()


def uncovered(modes) -> list[str]:
    """The parameter-server members of `modes` (an enum like Mode) that have no class."""
    return [m.value for m in modes if m.on_servers and m not in BEHAVIOURS]


def behaviour_class(mode: Mode) -> type[ModeBehaviour]:
    """The class of a parameter-server mode. Raises ValueError for another mode."""
    try:
        return BEHAVIOURS[Mode(mode)]
    except KeyError:
        raise ValueError(f"{mode} has no consistency rule: it runs without parameter servers") from None
