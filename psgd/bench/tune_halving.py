"""`psgd tune staleness` as successive halving over seeds: every bound runs
with few seeds, the slower half stops, the rest get more seeds, until the
finalists have the full number. Then the recommendation: the smallest bound
whose time-to-target interval is indistinguishable from the fastest bound's,
or, when no finalist can be told apart, a plain "indistinguishable".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from psgd.bench.outcomes import RunOutcome, mode_stats
from psgd.bench.stats import Rung, compare, halving_schedule, median_ci, survivors

__all__ = ["HalvingResult", "run_halving", "recommend_bound", "label_of", "median_time"]


def label_of(bound: int) -> str:
    return f"ssp:{bound}"


@dataclass
class HalvingResult:
    rungs: list[Rung]
    outcomes: dict[int, list[RunOutcome]] = field(default_factory=dict)
    stopped_at: dict[int, int] = field(default_factory=dict)   # bound -> rung after which it stopped

    @property
    def runs(self) -> int:
        return sum(len(v) for v in self.outcomes.values())

    def finalists(self) -> list[int]:
        top = max(len(v) for v in self.outcomes.values())
        return sorted(b for b, v in self.outcomes.items() if len(v) == top)


def median_time(runs: Sequence[RunOutcome]) -> float:
    """Median held time to target over seeds (not reached = inf)."""
    return median_ci([o.time_to_target_s if o.time_to_target_s is not None else math.inf for o in runs]).median


def run_halving(bounds: Sequence[int], max_seeds: int, run_arm: Callable[[int, list[int]], list[RunOutcome]],
                min_seeds: int = 1, eta: int = 2) -> HalvingResult:
    """`run_arm(bound, seed_offsets)` runs those seeds (offsets from the base
    seed) of one bound and returns their outcomes (failed runs left out)."""
    rungs = halving_schedule(len(bounds), max_seeds, min_seeds, eta)
    res = HalvingResult(rungs, {b: [] for b in bounds})
    alive, done = list(bounds), 0
    for i, rung in enumerate(rungs):
        if i:
            keep = survivors({b: median_time(res.outcomes[b]) for b in alive}, rung.arms)
            for b in alive:
                if b not in keep:
                    res.stopped_at[b] = i - 1
            alive = keep
        for b in alive:
            res.outcomes[b] += run_arm(b, list(range(done, rung.seeds)))
        done = rung.seeds
    return res


def recommend_bound(res: HalvingResult) -> tuple[Optional[int], str]:
    """(bound or None, the recommendation in words with its evidence)."""
    finals = [b for b in res.finalists() if res.outcomes[b]]
    if not finals:
        return None, "no run finished, so there is nothing to recommend"
    stats = mode_stats([o for b in finals for o in res.outcomes[b]], baseline="")
    by_bound = {b: stats[label_of(b)] for b in finals}
    if all(s.reached == 0 for s in by_bound.values()):
        return None, "no bound held the target in any seed: lower the target or train longer"
    fastest = min(finals, key=lambda b: (by_bound[b].time.median, b))
    same = [b for b in finals if compare(by_bound[b].time, by_bound[fastest].time).kind == "indistinguishable"]
    ev = "; ".join(f"s={b}: {by_bound[b].time.text(2, ' s')} ({by_bound[b].reached}/{by_bound[b].seeds} held)"
                   for b in finals)
    if len(same) == len(finals) and len(finals) > 1:
        pick = min(finals)
        return pick, (f"indistinguishable: the finalists' time-to-target intervals overlap ({ev}); "
                      f"s={pick}, the smallest, keeps staleness lowest at no measurable cost")
    pick = min(same)
    why = f"s={pick} is the smallest bound indistinguishable from the fastest (s={fastest})"
    beaten = [b for b in finals if b not in same]
    if beaten:
        why += "; slower with separated intervals: " + ", ".join(f"s={b}" for b in beaten)
    return pick, f"{why} ({ev})"
