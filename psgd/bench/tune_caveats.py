"""What `psgd tune staleness` saw that its verdicts alone do not say (the
report and the terminal print these facts; they are decided here):

- Bounds that never bind. Under SSP with bound s a pull waits while its clock
  is more than s ahead of the slowest worker, and is answered once the gap is
  back to s; so a run whose largest clock gap (summary `max_clock_gap`) stayed
  below s never made a worker wait. A bound whose every seed gave the same
  result as such a run (same rate and seed: the same held time, examples and
  final metric) did not change the run either. `never_bind_from` is the
  smallest s from which every larger bound is one or the other: those bounds
  are one run, and their "ties" say nothing about staleness.
- Rates at a grid's end: the best rate of a grid's end may not be the best
  rate; the tuner extends such a grid by one point (rate_beyond) and says
  where a chosen rate still sits at an end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from psgd.bench.outcomes import RunOutcome

__all__ = ["TuneCaveats", "never_bind_from", "rate_beyond", "grid_edge"]


@dataclass(frozen=True)
class TuneCaveats:
    never_bind_from: Optional[int] = None     # bounds >= this never made a worker wait here
    identical_from: bool = False              # and every one of them ran the same per-seed results
    rates_at_edge: dict[int, str] = field(default_factory=dict)   # bound -> "low" / "high": its rate's grid end
    extended: dict[int, float] = field(default_factory=dict)      # bound -> the rate run beyond its grid's end

    def lines(self) -> list[str]:
        """The caveats in words (empty when there is none)."""
        out = []
        if self.never_bind_from is not None:
            out.append(f"bounds ≥ {self.never_bind_from} never bind here (no worker waited)"
                       + (": identical runs" if self.identical_from else ""))
        if self.rates_at_edge:
            out.append("rate at an end of its grid" + (" (extended by one point)" if self.extended else "") + ": "
                       + ", ".join(f"s={b} ({end} end)" for b, end in sorted(self.rates_at_edge.items())))
        return out


def _same(a: RunOutcome, b: RunOutcome) -> bool:
    return (a.lr == b.lr and a.time_to_target_s == b.time_to_target_s and a.examples == b.examples
            and a.final_metric == b.final_metric)


def _identical(a: Sequence[RunOutcome], b: Sequence[RunOutcome]) -> bool:
    """Both ran at least one common seed, and every common seed gave the same result."""
    by_seed = {o.seed: o for o in b}
    common = [o for o in a if o.seed in by_seed]
    return bool(common) and all(_same(o, by_seed[o.seed]) for o in common)


def never_bind_from(outcomes: Mapping[int, Sequence[RunOutcome]], max_gaps: Mapping[int, Sequence[Optional[int]]]
                    ) -> tuple[Optional[int], bool]:
    """(the smallest bound from which no larger bound binds, or None; whether those
    bounds' runs are all identical). `max_gaps[b]`: each run's largest clock gap."""
    bounds = sorted(b for b in outcomes if outcomes[b])
    free = {b for b in bounds if max_gaps.get(b) and all(g is not None and g < b for g in max_gaps[b])}
    result: Optional[int] = None
    for b in reversed(bounds):
        if b in free or any(_identical(outcomes[b], outcomes[f]) for f in free if f > b):
            result = b
        else:
            break
    if result is None or result == bounds[-1]:
        return None, False     # only the largest bound (or none): nothing to flag against
    tail = [b for b in bounds if b >= result]
    return result, all(_identical(outcomes[tail[0]], outcomes[b]) for b in tail[1:])


def grid_edge(lr: float, grid: Sequence[float]) -> str:
    """"low" / "high" where lr is that end of the grid ("" inside it, or a one-point grid)."""
    g = sorted(grid)
    if len(g) < 2:
        return ""
    return "low" if lr == g[0] else "high" if lr == g[-1] else ""


def rate_beyond(grid: Sequence[float], end: str) -> float:
    """One more point past the grid's `end`, at the ratio of its last two points there."""
    g = sorted(grid)
    x = g[0] * g[0] / g[1] if end == "low" else g[-1] * g[-1] / g[-2]
    return float(f"{x:.6g}")
