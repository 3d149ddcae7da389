"""A shard's live settings: the adaptive bound, `psgd ctl` changes, and the
bound recorded at every answered pull.

ShardState asks this object which bound (and learning rate) is in force for
a clock, tells it about pushes, advancing clocks and answered pulls, and the
shard loop hands it CONTROL requests. Changes are reported through `emit`
(the shard's event log), one `setting_change` event per change.
"""
from __future__ import annotations

import hmac
from typing import Callable, Optional

from psgd.core.consistency import ClockBoard
from psgd.core.live_settings import ControlError, LiveSetting, LiveSettings, parse_change
from psgd.core.staleness_policy import BoundRule, StalenessPolicy

__all__ = ["ShardLive", "ControlError", "HOLD_TTL_S"]

HOLD_TTL_S = 10.0  # a prepared change nobody commits stops holding pulls after this
RECENT_CHANGES = 20  # changes listed in stats (emitted every second: kept short on long runs)


def _initial(cfg, lr: float) -> LiveSetting:
    c = cfg.consistency
    auto = c.staleness == "auto"
    return LiveSetting(mode=c.mode, staleness=c.staleness_min if auto else c.staleness, auto=auto, lr=lr)


class ShardLive:
    def __init__(self, cfg, workers: int, lr: Optional[float] = None, token: Optional[str] = None,
                 emit: Callable[..., None] = lambda event, **fields: None):
        """`lr`: the learning rate the shard's update rule starts with (the
        configured one unless the shard scales it); `psgd ctl` replaces it."""
        c = cfg.consistency
        self.run_mode = c.mode
        self.settings = LiveSettings(_initial(cfg, cfg.optimizer.lr if lr is None else lr))
        self.policy: Optional[StalenessPolicy] = None
        if c.mode in ("ssp", "asp"):
            self.policy = StalenessPolicy(BoundRule(c.staleness_min, c.staleness_max), workers)
        self.token = token
        self.emit = emit
        self.pulls_by_bound: dict[str, int] = {}   # bound in force -> answered pulls
        self.max_gap_over_bound: Optional[int] = None  # max(gap - bound) over answered ssp pulls

    # ---- what ShardState asks ------------------------------------------------
    def bound_at(self, clock: int) -> Optional[int]:
        return self.settings.at(clock).bound

    def lr_at(self, clock: int) -> float:
        return self.settings.at(clock).lr

    def holds(self, clock: int) -> bool:
        return self.settings.holds(clock)

    def answered(self, clock: int, gap: int) -> None:
        """A worker's pull at `clock` was answered with clock gap `gap`."""
        self.settings.note_answered(clock)
        bound = self.settings.at(clock).bound
        key = "none" if bound is None else str(bound)
        self.pulls_by_bound[key] = self.pulls_by_bound.get(key, 0) + 1
        if bound is not None:
            over = gap - bound
            self.max_gap_over_bound = over if self.max_gap_over_bound is None else max(self.max_gap_over_bound, over)

    def pushed(self, rank: int, clock: int, step_s: float) -> None:
        if self.policy is not None:
            self.policy.observe(rank, clock, step_s)

    def clocks_moved(self, board: ClockBoard) -> None:
        """The slowest clock may have crossed a decision clock: let the policy decide.

        The decision starts from the last scheduled setting (a change decided
        earlier may not be in force yet), and the change takes effect at
        D + 1 + (largest bound in force from then on) + 1: no shard can have
        answered a pull that far ahead, since the slowest worker's clock on any
        shard is at most D while this shard's just reached D."""
        if self.policy is None:
            return
        due = self.policy.decision_due(board.min_clock())
        if due is None:
            return
        before = self.settings.latest()
        if not before.auto or before.mode != "ssp":
            return
        decision = self.policy.decide(due, before.staleness, board.quorum())
        if not decision.changed:
            return
        effective = max(due + 2 + self.settings.max_bound_from(due - 1), self.settings.answered + 1)
        setting = self.settings.schedule(effective, {"staleness": decision.bound}, "auto")
        self.emit("setting_change", origin="auto", effective_clock=effective, changes={"staleness": decision.bound},
                  setting=setting.as_dict(), **decision.as_event())

    def expire(self, now: float) -> bool:
        if self.settings.expire(now):
            self.emit("setting_hold_expired")
            return True
        return False

    # ---- CONTROL requests ------------------------------------------------------
    def control(self, op: str, token: str, clock: int, changes: dict, now: float) -> tuple[int, dict]:
        """Handle one CONTROL request; returns (clock, detail) for the reply.
        Raises ControlError (state untouched) for a refused request."""
        if self.token is None:
            raise ControlError("no_token", "this shard has no run token (started without a run directory)")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
            raise ControlError("bad_token", "the run token does not match")
        if op == "show":
            return self.settings.answered, self.describe()
        if op == "abort":
            if self.settings.abort():
                self.emit("setting_hold_aborted")
            return self.settings.answered, {}
        fields = self._parse(changes)
        if op == "prepare":
            return self.settings.prepare(now, HOLD_TTL_S), {}
        if op == "commit":
            before = self.settings.at(clock - 1) if clock > 0 else self.settings.initial
            setting = self.settings.commit(clock, fields)
            self.emit("setting_change", origin="ctl", effective_clock=clock, changes=dict(changes),
                      previous=before.as_dict(), setting=setting.as_dict())
            return clock, setting.as_dict()
        raise ControlError("bad_op", f"unknown control operation {op!r} (show, prepare, commit, abort)")

    def _parse(self, changes: dict) -> dict:
        if not changes:
            raise ControlError("bad_value", "no setting to change")
        fields: dict = {}
        for key, value in changes.items():
            fields.update(parse_change(key, value, self.run_mode))
        return fields

    def describe(self) -> dict:
        nxt = self.settings.answered + 1
        changes = self.settings.changes()  # every change is also its own setting_change event
        return {"setting": self.settings.at(nxt).as_dict(), "next_clock": nxt, "changes_total": len(changes),
                "changes": changes[-RECENT_CHANGES:],
                "pulls_by_bound": dict(self.pulls_by_bound), "max_gap_over_bound": self.max_gap_over_bound}
