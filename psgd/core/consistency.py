"""The consistency policy: the one object that decides, for one shard, whether a
pull may be answered now and what a push does.

It owns the mode, the bound (fixed, adaptive, or changed live by `psgd ctl`,
all as one schedule of settings keyed by clock: psgd.core.live_settings) and
the clocks (psgd.core.clocks). The shard state, live control and the virtual
cluster call it; nothing else computes "slowest clock >= clock - bound".
Socket-free and time-free: callers pass clocks and `now`.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional, Union

from psgd.config.modes import Mode
from psgd.core.bsp import BspAggregator, PushOutcome
from psgd.core.clocks import ClockBoard, DeferredPulls
from psgd.core.live_settings import LiveSetting, LiveSettings
from psgd.core.staleness_policy import BoundDecision, BoundRule, StalenessPolicy

__all__ = ["Mode", "ConsistencyPolicy", "PushAction", "BoundChange", "ClockBoard", "DeferredPulls",
           "BspAggregator", "PushOutcome"]


class PushAction(str, Enum):
    AGGREGATE = "aggregate"      # BSP: counts toward the clock's averaged step
    APPLY = "apply"              # SSP/ASP: applied on arrival
    DROP_STALE = "drop_stale"    # staleness above optimizer.max_staleness_drop: never applied


@dataclass(frozen=True)
class BoundChange:
    """The adaptive policy changed the bound, from `effective_clock` on."""
    effective_clock: int
    setting: LiveSetting
    decision: BoundDecision


class ConsistencyPolicy:
    def __init__(self, mode: Mode, workers: int, staleness: Union[int, str] = 0, staleness_min: int = 0,
                 staleness_max: int = 8, lr: float = 0.0, max_staleness_drop: Optional[int] = None):
        self.mode = Mode(mode)
        if not self.mode.on_servers:
            raise ValueError("the all-reduce baseline has no parameter servers to keep consistent")
        auto = staleness == "auto"
        self.board = ClockBoard(workers)
        self.settings = LiveSettings(LiveSetting(mode=self.mode, staleness=staleness_min if auto else int(staleness),
                                                 auto=auto, lr=lr))
        self.adaptive = StalenessPolicy(BoundRule(staleness_min, staleness_max), workers) if self.mode.live else None
        self.max_staleness_drop = max_staleness_drop
        self.pulls_by_bound: dict[str, int] = {}       # bound in force -> answered pulls
        self.max_gap_over_bound: Optional[int] = None  # max(gap - bound) over answered SSP pulls

    @classmethod
    def from_config(cls, cfg, lr: float) -> "ConsistencyPolicy":
        """The policy of a shard started from `cfg`; `lr` is the rate its update rule starts with."""
        c = cfg.consistency
        return cls(c.mode, cfg.cluster.workers, c.staleness, c.staleness_min, c.staleness_max, lr,
                   cfg.optimizer.max_staleness_drop)

    # ---- what is in force ---------------------------------------------------
    def setting_at(self, clock: int) -> LiveSetting:
        return self.settings.at(clock)

    def lr_at(self, clock: int) -> float:
        return self.settings.at(clock).lr

    # ---- pulls ------------------------------------------------------------
    def pull_clock(self, rank: int, clock: int) -> int:
        """A client may not claim to be behind its own pushes (that would dodge the bound)."""
        return max(clock, self.board.clocks[rank])

    def pull_ready(self, rank: int, clock: int, bsp_step: int = 0) -> bool:
        """May a pull from `rank` at `clock` be answered now? `bsp_step`: the clock a BSP
        shard is aggregating (every clock below it has been applied)."""
        clock = self.pull_clock(rank, clock)
        if self.settings.holds(clock):  # a `psgd ctl` change is being agreed for this clock
            return False
        setting = self.settings.at(clock)
        if setting.mode is Mode.BSP:
            return bsp_step >= clock
        if setting.mode is Mode.ASP:
            return True
        low = self.board.min_clock()
        return low is None or low >= clock - setting.staleness

    def answered(self, rank: int, clock: int) -> tuple[int, int]:
        """A pull was answered: (its clock, the slowest quorum clock); records the gap
        against the bound in force, which a test holds at <= 0 for every SSP pull."""
        clock = self.pull_clock(rank, clock)
        low = self.board.min_clock()
        low = clock if low is None else low
        self.settings.note_answered(clock)
        bound = self.settings.at(clock).bound
        key = "none" if bound is None else str(bound)
        self.pulls_by_bound[key] = self.pulls_by_bound.get(key, 0) + 1
        if bound is not None:
            over = max(0, clock - low) - bound
            self.max_gap_over_bound = over if self.max_gap_over_bound is None else max(self.max_gap_over_bound, over)
        return clock, low

    # ---- pushes -----------------------------------------------------------
    def push_action(self, staleness: int) -> PushAction:
        """What a (finite, first-seen) push of this staleness does."""
        if self.mode is Mode.BSP:
            return PushAction.AGGREGATE
        if self.max_staleness_drop is not None and staleness > self.max_staleness_drop:
            return PushAction.DROP_STALE
        return PushAction.APPLY

    def pushed(self, rank: int, clock: int, step_s: float) -> None:
        """A worker's push for `clock` arrived, reporting its step time."""
        if self.adaptive is not None:
            self.adaptive.observe(rank, clock, step_s)

    def advanced(self, rank: int, clock: int) -> Optional[BoundChange]:
        """`rank`'s push for `clock` completed. Under an adaptive bound the slowest clock
        may have crossed a decision clock D: the new bound takes effect at
        D + 1 + (largest bound in force from then on) + 1, which no shard can have
        answered yet (the slowest worker's clock on any shard is at most D while this
        shard's just reached D), so every shard switches at the same clock."""
        self.board.advance(rank, clock)
        if self.adaptive is None:
            return None
        due = self.adaptive.decision_due(self.board.min_clock())
        if due is None:
            return None
        before = self.settings.latest()  # a change decided earlier may not be in force yet
        if not before.auto or before.mode is not Mode.SSP:
            return None
        decision = self.adaptive.decide(due, before.staleness, self.board.quorum())
        if not decision.changed:
            return None
        effective = max(due + 2 + self.settings.max_bound_from(due - 1), self.settings.answered + 1)
        setting = self.settings.schedule(effective, {"staleness": decision.bound}, "auto")
        return BoundChange(effective, setting, decision)

    # ---- reporting ------------------------------------------------------------
    def describe(self, recent: int) -> dict:
        nxt = self.settings.answered + 1
        changes = self.settings.changes()  # every change is also its own setting_change event
        return {"setting": self.settings.at(nxt).as_dict(), "next_clock": nxt, "changes_total": len(changes),
                "changes": changes[-recent:],
                "pulls_by_bound": dict(self.pulls_by_bound), "max_gap_over_bound": self.max_gap_over_bound}
