"""Settings a live run may change, keyed by the clock they take effect at.

A shard enforces, for the pull (and the push) of clock c, the settings in
force at c: consistency mode (ssp or asp), SSP bound, whether the bound is
adaptive, and the learning rate. A change names an effective clock E; pulls
and pushes of clocks below E keep the old settings, from E on the new ones.
Because E is chosen above every clock any shard has answered, all shards
switch at the same clock.

Two ways in:
- `psgd ctl` (two phases): `prepare` holds every pull at or above the shard's
  next unanswered clock and returns that clock; the controller takes the
  largest over all shards as E and `commit`s the change at E everywhere,
  which releases the hold. A hold that is never committed expires.
- the adaptive policy (`schedule` with origin "auto") at a clock it derives
  from the slowest worker's clock and the largest bound in force.

Pure bookkeeping, no sockets and no time source of its own (callers pass `now`).
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Any, Optional

from psgd.config.modes import Mode
from psgd.config.schema import MAX_STALENESS
from psgd.core.error_codes import ErrorCode
from psgd.core.modes import BEHAVIOURS

__all__ = ["LiveSetting", "LiveSettings", "ControlError", "CONTROL_KEYS", "parse_change", "plain_fields",
           "typed_fields"]

CONTROL_KEYS = ("consistency.staleness", "consistency.mode", "optimizer.lr")


class ControlError(ValueError):
    """A control request that cannot be applied; `code` is sent back to the caller."""

    def __init__(self, code: str, reason: str):
        self.code = code
        self.reason = reason
        super().__init__(f"{code}: {reason}")


@dataclass(frozen=True)
class LiveSetting:
    mode: Mode
    staleness: int              # SSP bound in force (also kept while in asp, for switching back)
    auto: bool                  # the bound follows the adaptive policy
    lr: float

    def __post_init__(self):
        object.__setattr__(self, "mode", Mode(self.mode))  # a mode's name is accepted, the enum is kept

    @property
    def bound(self) -> Optional[int]:
        """The clock gap a pull may have; None: the mode's pulls wait on no bound (asp, bsp)."""
        return self.staleness if BEHAVIOURS[self.mode].BOUNDED else None

    def as_dict(self) -> dict:
        return {"mode": self.mode.value, "staleness": "auto" if self.auto else self.staleness,
                "bound": self.staleness, "lr": self.lr}


def parse_change(key: str, value: Any, run_mode: Mode) -> dict:
    """Validate one `key=value` of `psgd ctl set` for a run started in `run_mode`;
    returns the LiveSetting fields it changes. Raises ControlError naming the key."""
    if key not in CONTROL_KEYS:
        raise ControlError(ErrorCode.BAD_KEY, f"{key!r} cannot be changed live (one of {', '.join(CONTROL_KEYS)})")
    if key == "optimizer.lr":
        lr = _number(key, value)
        if not (lr > 0 and math.isfinite(lr)):
            raise ControlError(ErrorCode.BAD_VALUE, f"{key} must be a finite number > 0, got {value!r}")
        return {"lr": lr}
    if not Mode(run_mode).live:
        raise ControlError(ErrorCode.BAD_MODE, f"{key} can be changed only in ssp or asp runs; this run is {run_mode}")
    if key == "consistency.mode":
        try:
            mode = Mode(value)
        except ValueError:
            mode = None
        if mode is None or not mode.live:
            raise ControlError(ErrorCode.BAD_VALUE, f"{key} can switch between ssp and asp only, got {value!r}")
        return {"mode": mode}
    if value == "auto":
        return {"auto": True}
    bound = _number(key, value)
    if not (0 <= bound <= MAX_STALENESS and bound == int(bound)):  # nan and inf fail the range test
        raise ControlError(ErrorCode.BAD_VALUE, f"{key} must be an integer in 0..{MAX_STALENESS} or 'auto', got {value!r}")
    return {"staleness": int(bound), "auto": False}


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ControlError(ErrorCode.BAD_VALUE, f"{key} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ControlError(ErrorCode.BAD_VALUE, f"{key} must be a number, got {value!r}") from None


@dataclass
class _Hold:
    clock: int
    deadline: float
    owner: str      # the controller that prepared it: only it may commit or abort it


class LiveSettings:
    """The settings schedule of one shard, and the hold of a two-phase change."""

    def __init__(self, initial: LiveSetting):
        self.initial = initial
        self._changes: list[tuple[int, str, dict]] = []   # (effective clock, origin, fields), by clock
        self._clocks: list[int] = []                       # effective clocks of _settings
        self._settings: list[LiveSetting] = []             # the setting from each effective clock on
        self.answered = -1          # highest clock this shard answered a worker's pull for
        self.hold: Optional[_Hold] = None

    # ---- reading -----------------------------------------------------------
    def at(self, clock: int) -> LiveSetting:
        if not self._clocks:  # no change scheduled (the common case): asked a few times per request
            return self.initial
        i = bisect_right(self._clocks, clock)
        return self._settings[i - 1] if i else self.initial

    def latest(self) -> LiveSetting:
        """The setting of the last scheduled change (in force from its clock on)."""
        return self._settings[-1] if self._settings else self.initial

    def max_bound_from(self, clock: int) -> int:
        """The largest SSP bound in force at `clock` or any later clock."""
        i = max(0, bisect_right(self._clocks, clock) - 1)
        return max([self.at(clock).staleness] + [s.staleness for s in self._settings[i:]])

    def changes(self) -> list[dict]:
        return [{"clock": c, "origin": o, **f} for c, o, f in self._changes]

    @property
    def static(self) -> bool:
        """No change scheduled and none being agreed: the initial setting holds everywhere."""
        return not self._changes and self.hold is None

    def holds(self, clock: int) -> bool:
        """Must a pull at `clock` wait for a two-phase change in progress?"""
        return self.hold is not None and clock >= self.hold.clock

    def note_answered(self, clock: int) -> None:
        if clock > self.answered:
            self.answered = clock

    # ---- changing ----------------------------------------------------------
    def schedule(self, clock: int, fields: dict, origin: str) -> LiveSetting:
        """Take `fields` into force from `clock` on. A change of the bound or mode
        by hand ("ctl") replaces the adaptive policy's own changes at or after it."""
        if clock <= self.answered:
            raise ControlError(ErrorCode.TOO_LATE, f"clock {clock} was already answered here (up to {self.answered})")
        if origin != "auto" and ({"staleness", "mode", "auto"} & set(fields)):
            self._changes = [ch for ch in self._changes if not (ch[1] == "auto" and ch[0] >= clock)]
        at = bisect_right([c for c, _, _ in self._changes], clock)
        self._changes.insert(at, (clock, origin, dict(fields)))
        self._rebuild()
        return self.at(clock)

    def _rebuild(self) -> None:
        current, clocks, settings = self.initial, [], []
        for clock, _, fields in self._changes:
            current = replace(current, **fields)
            if clocks and clocks[-1] == clock:
                settings[-1] = current
            else:
                clocks.append(clock)
                settings.append(current)
        self._clocks, self._settings = clocks, settings

    def prepare(self, now: float, ttl_s: float, owner: str) -> int:
        """Phase one: hold pulls from the next unanswered clock on for `owner`; returns it.
        The same owner preparing again (a resent request) keeps its hold."""
        if self.hold is not None and now < self.hold.deadline and self.hold.owner != owner:
            raise ControlError(ErrorCode.BUSY, f"another controller is changing this run (holding clock {self.hold.clock})")
        if self.hold is None or self.hold.owner != owner or now >= self.hold.deadline:
            self.hold = _Hold(self.answered + 1, now + ttl_s, owner)
        return self.hold.clock

    def commit(self, clock: int, fields: dict, owner: str) -> LiveSetting:
        """Phase two: the change takes effect at `clock` (>= the held clock); the hold ends.
        Only the controller that holds the shard may commit."""
        self._check_owner(owner)
        if clock < self.hold.clock:
            raise ControlError(ErrorCode.BAD_CLOCK, f"commit at clock {clock} below the held clock {self.hold.clock}")
        setting = self.schedule(clock, fields, "ctl")
        self.hold = None
        return setting

    def abort(self, owner: str) -> bool:
        """End `owner`'s hold; False if there was none. Another controller's hold stays."""
        if self.hold is None:
            return False
        self._check_owner(owner)
        self.hold = None
        return True

    def _check_owner(self, owner: str) -> None:
        if self.hold is None:
            raise ControlError(ErrorCode.NOT_PREPARED, "no prepared change (or the hold expired)")
        if self.hold.owner != owner:
            raise ControlError(ErrorCode.NOT_OWNER, "another controller holds this shard")

    # ---- durable -------------------------------------------------------------
    def state_dict(self) -> dict:
        """The scheduled changes and the highest answered clock, as plain values (snapshots)."""
        return {"answered": self.answered,
                "changes": [[c, o, plain_fields(f)] for c, o, f in self._changes]}

    def load_state_dict(self, sd: dict) -> None:
        self.answered = int(sd["answered"])
        self._changes = [(int(c), str(o), typed_fields(f)) for c, o, f in sd["changes"]]
        self._rebuild()

    def expire(self, now: float) -> bool:
        """End a hold whose controller went away; True if one ended."""
        if self.hold is not None and now >= self.hold.deadline:
            self.hold = None
            return True
        return False



def plain_fields(fields: dict) -> dict:
    """A change's fields as msgpack/JSON-able values (the mode by name)."""
    return {k: (v.value if isinstance(v, Mode) else v) for k, v in fields.items()}


def typed_fields(fields: dict) -> dict:
    """The inverse of plain_fields."""
    return {k: (Mode(v) if k == "mode" else v) for k, v in fields.items()}
