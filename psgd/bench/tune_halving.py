"""`psgd tune staleness` over seeds: every bound runs a few seeds, and a bound
stops only when psgd.bench.verdict.judge finds it SLOWER than the fastest
bound (by median) at that point; bounds that cannot be told apart advance
together, so no bound is dropped by a tie-break. The seeds per rung grow by
`eta` up to the full number (stats.halving_schedule's seeds).

The recommendation is worded from the verdicts: the smallest bound TIED with
the bound of lowest median (or that bound itself), naming the bounds that are
slower and those the seeds could not tell apart, with each bound's held
counts. A bound is called "the fastest" only when every other finalist is
judged SLOWER than it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from psgd.bench.outcomes import ModeStats, RunOutcome, mode_stats
from psgd.bench.stats import TIE_MARGIN, Rung, halving_schedule, median_ci
from psgd.bench.verdict import Judgement, Outcome

__all__ = ["HalvingResult", "run_halving", "recommend_bound", "label_of", "median_time", "bound_stats"]


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


def bound_stats(outcomes: dict[int, list[RunOutcome]], bounds: Sequence[int]) -> dict[int, ModeStats]:
    """Per bound: its seeds' stats (each bound may run at its own rate)."""
    out = {}
    for b in bounds:
        if outcomes[b]:
            out[b] = mode_stats(outcomes[b], baseline="")[label_of(b)]
    return out


def _fastest(stats: dict[int, ModeStats]) -> int:
    return min(stats, key=lambda b: (stats[b].time.median, -stats[b].reached, b))


def run_halving(bounds: Sequence[int], max_seeds: int, run_arm: Callable[[int, list[int]], list[RunOutcome]],
                min_seeds: int = 1, eta: int = 2) -> HalvingResult:
    """`run_arm(bound, seed_offsets)` runs those seeds (offsets from the base
    seed) of one bound and returns their outcomes (failed runs left out)."""
    seeds = [r.seeds for r in halving_schedule(len(bounds), max_seeds, min_seeds, eta)]
    res = HalvingResult([], {b: [] for b in bounds})
    alive, done = list(bounds), 0
    for i, n in enumerate(seeds):
        if i:
            stats = bound_stats(res.outcomes, alive)
            if stats:
                best = _fastest(stats)
                for b in list(alive):
                    if b != best and b in stats and stats[b].versus(stats[best]).outcome is Outcome.SLOWER:
                        res.stopped_at[b] = i - 1
                        alive.remove(b)
        res.rungs.append(Rung(len(alive), n))
        for b in alive:
            res.outcomes[b] += run_arm(b, list(range(done, n)))
        done = n
    return res


def _ev(b: int, s: ModeStats) -> str:
    return f"s={b}: {s.time.time_text()}, held {s.reached}/{s.seeds}"


def recommend_bound(res: HalvingResult, notes: Sequence[str] = ()) -> tuple[Optional[int], str]:
    """(bound or None, the recommendation in words with its evidence). `notes`:
    what the verdicts cannot say (tune_caveats.TuneCaveats.lines), appended."""
    finals = [b for b in res.finalists() if res.outcomes[b]]
    if not finals:
        return None, "no run finished, so there is nothing to recommend"
    stats = bound_stats(res.outcomes, finals)
    if all(s.reached == 0 for s in stats.values()):
        return None, "no bound held the target in any seed: lower the target or train longer"
    low = _fastest(stats)   # the lowest median: "fastest" only once the verdicts say so
    verdicts: dict[int, Judgement] = {b: stats[b].versus(stats[low]) for b in finals if b != low}
    tied = sorted([low] + [b for b, j in verdicts.items() if j.outcome is Outcome.TIED])
    slower = [b for b, j in verdicts.items() if j.outcome is Outcome.SLOWER]
    unsure = [b for b, j in verdicts.items() if j.outcome is Outcome.INCONCLUSIVE]
    pick = min(tied)
    ev = "; ".join(_ev(b, stats[b]) for b in finals)
    if len(tied) == len(finals) and len(finals) > 1:
        why = (f"every finalist is tied with s={low} (the lowest median) within ±{TIE_MARGIN:.0%}; "
               f"s={pick}, the smallest, keeps staleness lowest")
    elif pick == low and len(slower) == len(verdicts):
        why = f"s={pick} is the fastest: every other finalist is slower"
    elif pick == low:
        why = f"s={pick} has the lowest median time, but is not shown faster than every other bound"
    else:
        why = f"s={pick} is the smallest bound tied with s={low} (the lowest median): {verdicts[pick].text()}"
    if slower:
        why += f"; slower than s={low}: " + ", ".join(f"s={b} ({verdicts[b].text()})" for b in slower)
    if unsure:
        why += (f"; not told apart from s={low} with these seeds (more seeds would decide): "
                + ", ".join(f"s={b} ({verdicts[b].text()})" for b in unsure))
    why += "".join(f"; {n}" for n in notes)
    return pick, f"{why} ({ev})"
