"""A shard's CONTROL requests (`psgd ctl`) and its `setting_change` events.

The settings themselves, their schedule by clock and the adaptive bound live in
the shard's consistency policy (psgd.core.modes.policy); this object checks the
run token, parses a requested change, drives the policy's two-phase
prepare/commit, and reports every change through `emit` (the shard's event log).
"""
from __future__ import annotations

import hmac
from typing import Callable, Optional

from psgd.core.live_settings import ControlError, parse_change
from psgd.core.modes.policy import BoundChange, ConsistencyPolicy
from psgd.runtime.event_names import Event
from psgd.wire.protocol import ErrorCode

__all__ = ["ShardLive", "ControlError", "HOLD_TTL_S"]

HOLD_TTL_S = 10.0  # a prepared change nobody commits stops holding pulls after this
RECENT_CHANGES = 20  # changes listed in stats (emitted every second: kept short on long runs)


class ShardLive:
    def __init__(self, policy: ConsistencyPolicy, token: Optional[str] = None,
                 emit: Callable[..., None] = lambda event, **fields: None,
                 journal: Callable[[int, str, dict], None] = lambda clock, origin, fields: None):
        """`journal(clock, origin, fields)` makes a committed change durable (the shard's
        push log) before the controller hears of it."""
        self.policy = policy
        self.token = token
        self.emit = emit
        self.journal = journal

    def bound_changed(self, change: Optional[BoundChange]) -> None:
        """Report a change the adaptive policy made (None: it made none)."""
        if change is not None:
            self.emit(Event.SETTING_CHANGE, origin="auto", effective_clock=change.effective_clock,
                      changes={"staleness": change.decision.bound}, setting=change.setting.as_dict(),
                      **change.decision.as_event())

    def expire(self, now: float) -> bool:
        if self.policy.settings.expire(now):
            self.emit(Event.SETTING_HOLD_EXPIRED)
            return True
        return False

    # ---- CONTROL requests ------------------------------------------------------
    def control(self, op: str, token: str, clock: int, changes: dict, now: float,
                owner: str = "") -> tuple[int, dict]:
        """Handle one CONTROL request; returns (clock, detail) for the reply.
        Raises ControlError (state untouched) for a refused request."""
        if self.token is None:
            raise ControlError(ErrorCode.NO_TOKEN, "this shard has no run token (started without a run directory)")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
            raise ControlError(ErrorCode.BAD_TOKEN, "the run token does not match")
        settings = self.policy.settings
        if op in ("show", "status"):  # status: the shard adds its clocks and waits (servers/service.py)
            return settings.answered, self.describe()
        if op == "abort":
            if settings.abort(owner):
                self.emit(Event.SETTING_HOLD_ABORTED)
            return settings.answered, {}
        fields = self._parse(changes)
        if op == "prepare":
            return settings.prepare(now, HOLD_TTL_S, owner), {}
        if op == "commit":
            before = settings.at(clock - 1) if clock > 0 else settings.initial
            setting = settings.commit(clock, fields, owner)
            self.journal(clock, "ctl", fields)
            self.emit(Event.SETTING_CHANGE, origin="ctl", effective_clock=clock, changes=dict(changes),
                      previous=before.as_dict(), setting=setting.as_dict())
            return clock, setting.as_dict()
        raise ControlError(ErrorCode.BAD_OP, f"unknown control operation {op!r} (show, status, prepare, commit, abort)")

    def _parse(self, changes: dict) -> dict:
        if not changes:
            raise ControlError(ErrorCode.BAD_VALUE, "no setting to change")
        fields: dict = {}
        for key, value in changes.items():
            fields.update(parse_change(key, value, self.policy.mode))
        return fields

    def describe(self) -> dict:
        return self.policy.describe(RECENT_CHANGES)
