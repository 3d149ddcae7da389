"""The consistency policy: the one object that decides, for one shard, whether a
pull may be answered now and what a push does.

It owns the mode's behaviour (one class per mode: psgd.core.modes), the bound (fixed, adaptive, or changed live by `psgd ctl`,
all as one schedule of settings keyed by clock: psgd.core.live_settings) and
the clocks (psgd.core.clocks). The shard state, live control and the virtual
cluster call it; nothing else computes "slowest clock >= clock - bound".
Socket-free and time-free: callers pass clocks and `now`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Union

import torch

from psgd.config.modes import Mode
from psgd.config.quorum import QuorumConfig
from psgd.core.clocks import ClockBoard, DeferredPulls
from psgd.core.live_settings import LiveSetting, LiveSettings
from psgd.core.modes import ModeBehaviour, PushAction, Update, behaviour_class
from psgd.core.modes.bsp_rounds import BspAggregator, PushOutcome
from psgd.core.modes.quorum import QuorumBsp
from psgd.core.staleness_policy import BoundDecision, BoundLimits, StalenessPolicy

__all__ = ["Mode", "ConsistencyPolicy", "PushAction", "BoundChange", "Finished", "ClockBoard", "DeferredPulls",
           "BspAggregator", "PushOutcome", "Update"]


@dataclass(frozen=True)
class BoundChange:
    """The adaptive policy changed the bound, from `effective_clock` on."""
    effective_clock: int
    setting: LiveSetting
    decision: BoundDecision


@dataclass(frozen=True)
class Finished:
    """What the end of a push's handling did beyond the push itself."""
    late: bool = False                       # its clock was already applied: dropped (bsp backup workers)
    update: Optional[Update] = None          # an aggregated step it completed, to apply
    bound_change: Optional[BoundChange] = None  # the adaptive bound changed
    carried: bool = False                    # its round was already merged: it goes into the next (quorum)


_NOTHING_MORE = Finished()


class ConsistencyPolicy:
    """`numel`, `backup_workers`: what a mode that aggregates (bsp) sums, and how many
    of a clock's pushes it may go without. `members`: the ranks in the first quorum
    (elastic workers: the range's min; None: all `workers`)."""

    def __init__(self, mode: Mode, workers: int, staleness: Union[int, str] = 0, staleness_min: int = 0,
                 staleness_max: int = 8, lr: float = 0.0, max_staleness_drop: Optional[int] = None,
                 numel: int = 0, backup_workers: int = 0, members: Optional[int] = None,
                 quorum: Optional[QuorumConfig] = None):
        self.mode = Mode(mode)
        if not self.mode.on_servers:
            raise ValueError("the all-reduce baseline has no parameter servers to keep consistent")
        auto = staleness == "auto"
        self.board = ClockBoard(workers, members)
        if quorum is not None and self.mode is not Mode.BSP:
            raise ValueError(f"quorum merging is a form of bsp, not of {self.mode}")
        self.rule: ModeBehaviour = (QuorumBsp(self.board, numel, quorum) if quorum is not None
                               else behaviour_class(self.mode)(self.board, numel, backup_workers))
        self._rules: dict[Mode, ModeBehaviour] = {self.mode: self.rule}  # and the modes psgd ctl switched to
        # The quorum-merging rule, when the shard runs one (read several times per push: worked out once).
        self.quorum: Optional[QuorumBsp] = self.rule if isinstance(self.rule, QuorumBsp) else None
        self.settings = LiveSettings(LiveSetting(mode=self.mode, staleness=staleness_min if auto else int(staleness),
                                                 auto=auto, lr=lr))
        self.adaptive = StalenessPolicy(BoundLimits(staleness_min, staleness_max), workers) if self.mode.live else None
        self.max_staleness_drop = max_staleness_drop
        self.pulls_by_bound: Counter[str] = Counter()  # bound in force -> answered pulls
        self.max_gap_over_bound: Optional[int] = None  # max(gap - bound) over answered SSP pulls

    @classmethod
    def from_config(cls, cfg, lr: float, numel: int = 0) -> "ConsistencyPolicy":
        """The policy of a shard of `numel` parameters started from `cfg`; `lr` is the
        rate its update rule starts with."""
        c = cfg.consistency
        return cls(c.mode, cfg.cluster.workers, c.staleness, c.staleness_min, c.staleness_max, lr,
                   cfg.optimizer.max_staleness_drop, numel, c.backup_workers, cfg.cluster.starting_workers,
                   c.quorum)

    # ---- what is in force ---------------------------------------------------
    def setting_at(self, clock: int) -> LiveSetting:
        return self.settings.at(clock)

    def lr_at(self, clock: int) -> float:
        return self.settings.at(clock).lr

    # ---- pulls ------------------------------------------------------------
    def pull_clock(self, rank: int, clock: int) -> int:
        """A client may not claim to be behind its own pushes (that would dodge the bound)."""
        own = self.board.clocks[rank]
        return clock if clock > own else own

    def pull_ready(self, rank: int, clock: int) -> bool:
        """May a pull from `rank` at `clock` be answered now? The mode in force at that
        clock decides."""
        clock = self.pull_clock(rank, clock)
        if self.settings.holds(clock):  # a `psgd ctl` change is being agreed for this clock
            return False
        setting = self.settings.at(clock)
        return self._rule(setting.mode).pull_ready(clock, setting.staleness)

    def _rule(self, mode: Mode) -> ModeBehaviour:
        rule = self._rules.get(mode)
        if rule is None:  # a mode psgd ctl switched to (ssp <-> asp): it keeps no state of its own
            rule = self._rules[mode] = behaviour_class(mode)(self.board, 0)
        return rule

    def readiness(self) -> Optional[tuple[int, int]]:
        """What the readiness of a parked pull depends on, while nothing else can change
        it: (slowest quorum clock, the rule's progress), neither of which moves back, so
        a pull not ready at one value is not ready at any later equal value (a rank's own
        clock, which its pull may not be below, only makes it less ready). None (always
        look again) while the settings may change (a psgd ctl change, a hold, an adaptive
        bound) or the quorum is empty."""
        if not self.settings.static or self.settings.initial.auto:
            return None
        low = self.board.min_clock()
        return None if low is None else (low, self.rule.progress())

    def answered(self, rank: int, clock: int) -> tuple[int, int]:
        """A pull was answered: (its clock, the slowest quorum clock); records the gap
        against the bound in force, which a test holds at <= 0 for every SSP pull."""
        clock = self.pull_clock(rank, clock)
        low = self.board.min_clock()
        low = clock if low is None else low
        self.settings.note_answered(clock)
        bound = self.settings.at(clock).bound
        key = "none" if bound is None else str(bound)
        self.pulls_by_bound[key] += 1
        if bound is not None:
            over = max(0, clock - low) - bound
            self.max_gap_over_bound = over if self.max_gap_over_bound is None else max(self.max_gap_over_bound, over)
        return clock, low

    # ---- pushes -----------------------------------------------------------
    def push_refusal(self, clock: int) -> Optional[str]:
        """Why a push for `clock` is impossible now (None: it is possible)."""
        return self.rule.push_refusal(clock)

    def push_action(self, staleness: int) -> PushAction:
        """What a (finite, first-seen) push of this staleness does."""
        return self.rule.push_action(staleness, self.max_staleness_drop)

    def pushed(self, rank: int, clock: int, step_s: float) -> float:
        """A worker's push for `clock` arrived, reporting its step time; returns the
        learning rate it is applied with."""
        if self.adaptive is not None:
            self.adaptive.observe(rank, clock, step_s)
        return self.lr_at(self.rule.lr_clock(clock))

    def finished(self, rank: int, clock: int, staleness: int, grad: Optional[torch.Tensor] = None,
                 weight: float = 1.0) -> Finished:
        """`rank`'s push for `clock` is handled: applied, rejected, or (`grad`) to be
        aggregated, weighing `weight` (its examples). Counts it, moves the rank's clock
        on and says what follows."""
        counted = self.rule.count(rank, clock, grad, staleness, weight)
        change = self.advanced(rank, clock)
        update = self.rule.due()
        if not counted.late and update is None and change is None and not counted.carried:
            return _NOTHING_MORE  # the common case, one per push: no frozen dataclass built
        return Finished(counted.late, update, change, counted.carried)

    def close_round(self) -> Optional[Update]:
        """The quorum's grace window passed: the round merges once q are in (now, if they are)."""
        self.rule.close()
        return self.rule.due()

    def joined(self, rank: int) -> int:
        """A worker (re)joins the quorum; returns the clock it continues from."""
        return self.board.join(rank, at=self.rule.join_clock())

    def departed(self, rank: int) -> Optional[Update]:
        """A worker leaves the quorum; returns an aggregated step that waited only for it."""
        self.board.depart(rank)
        return self.rule.due()

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
        if not before.auto or not behaviour_class(before.mode).BOUNDED:
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
