"""The one rule every comparison of two modes (or bounds) is judged by, real
runs and simulated alike, in one vocabulary (`Outcome`), as DESIGN.md §8 states it:

- no decisive verdict on fewer than MIN_DECISIVE_SEEDS (3) seeds a side:
  INCONCLUSIVE, "too few seeds" (`Judgement.too_few_seeds`);
- FASTER / SLOWER: the 95% interval of the ratio a / b (psgd.bench.stats.ratio_ci)
  lies wholly below 1 - margin (above 1 + margin): a difference larger than the
  margin, at both ends of the interval;
- TIED: the interval lies inside [1 - margin, 1 + margin] (default ±10%);
- INCONCLUSIVE: anything else, overlapping intervals included. Overlap never
  confirms anything.

Censoring. A seed that did not reach its target by its run's end (the cap) has
an unknown time, known only to exceed the cap. Such a seed enters the ratio
with its cap, so the computed ratio is a bound on the true one: a lower bound
when only `a` has censored seeds, an upper bound when only `b` has. A verdict
is kept only where the bound points its way (a's censored seeds can make `a`
SLOWER, never FASTER or TIED); otherwise it is INCONCLUSIVE. A FASTER/SLOWER
verdict that rests on censored seeds is flagged `decided_by_cap`: it holds
whatever the censored times are, but its size is the cap's.

Pairing. Where both sides ran the same seeds (Sample.seeds), the interval is
taken on the per-seed ratios (common random numbers: the same data order and
delays), so two modes whose every seed gives the same time are TIED, not
INCONCLUSIVE from each side's own spread.

For quantities where higher is better (accuracy), FASTER reads "better".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional, Sequence

from psgd.bench.stats import TIE_MARGIN, Interval, ratio_ci

__all__ = ["Outcome", "Sample", "Judgement", "judge", "TIE_MARGIN", "MIN_DECISIVE_SEEDS", "Claimed", "ClaimVerdict",
           "claim_verdict"]

# Fewest seeds a side needs for FASTER, SLOWER or TIED (DESIGN.md §8): at two, no
# interval method keeps false decisions on null pairs near 5% (the percentile
# bootstrap made them in 13.5% of trials).
MIN_DECISIVE_SEEDS = 3


class Outcome(str, Enum):
    FASTER = "faster"
    SLOWER = "slower"
    TIED = "tied"
    INCONCLUSIVE = "inconclusive"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Sample:
    """Per-seed values (time to target, or another lower-is-better cost);
    `censored[i]`: seed i did not reach the target, and `values[i]` is its cap
    (how long it ran), a lower bound on its true value."""
    values: tuple[float, ...]
    censored: tuple[bool, ...]
    seeds: Optional[tuple[int, ...]] = None   # the run seed of each value, where known

    def __post_init__(self):
        if len(self.values) != len(self.censored):
            raise ValueError("Sample: values and censored differ in length")
        if self.seeds is not None and len(self.seeds) != len(self.values):
            raise ValueError("Sample: values and seeds differ in length")
        if any(math.isnan(v) or math.isinf(v) for v in self.values):
            raise ValueError("Sample: values must be finite (a censored seed holds its cap)")

    @classmethod
    def of(cls, times: Sequence[float], caps: Optional[Sequence[Optional[float]]] = None,
           seeds: Optional[Sequence[int]] = None) -> "Sample":
        """`times`: inf (or None) where not reached; `caps[i]`: how far seed i ran
        (needed for every such seed; a censored seed without one counts 0, which
        can only make a verdict less sure)."""
        vals, cens = [], []
        for i, t in enumerate(times):
            if t is None or math.isinf(t):
                cap = caps[i] if caps is not None else None
                vals.append(float(cap) if cap is not None and math.isfinite(cap) else 0.0)
                cens.append(True)
            else:
                vals.append(float(t))
                cens.append(False)
        return cls(tuple(vals), tuple(cens), None if seeds is None else tuple(int(k) for k in seeds))

    def paired_with(self, other: "Sample") -> Optional[tuple["Sample", "Sample"]]:
        """Both samples ordered by seed when they ran the same seeds (else None)."""
        if self.seeds is None or other.seeds is None or sorted(self.seeds) != sorted(other.seeds) \
                or len(set(self.seeds)) != len(self.seeds):
            return None

        def by_seed(s: "Sample") -> "Sample":
            order = sorted(range(s.n), key=lambda i: s.seeds[i])
            return Sample(tuple(s.values[i] for i in order), tuple(s.censored[i] for i in order),
                          tuple(s.seeds[i] for i in order))
        return by_seed(self), by_seed(other)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def n_censored(self) -> int:
        return sum(self.censored)


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    ratio: Interval            # a / b (psgd.bench.stats.ratio_ci), censored seeds at their caps
    margin: float
    decided_by_cap: bool       # FASTER/SLOWER that rests on seeds censored at their cap
    censored: tuple[int, int]  # censored seeds of a, of b
    seeds: tuple[int, int]
    higher_is_better: bool = False
    paired: bool = False       # the two sides ran the same seeds, judged on per-seed ratios

    @property
    def too_few_seeds(self) -> bool:
        """INCONCLUSIVE because a side has fewer than MIN_DECISIVE_SEEDS seeds."""
        return min(self.seeds) < MIN_DECISIVE_SEEDS

    def text(self) -> str:
        """e.g. 'slower: ratio 1.42 [1.30, 1.55] (±10% margin, paired by seed; decided by the cap; censored
        at the cap: 3/5 and 0/5 seeds)'."""
        word = self.outcome.value
        if self.too_few_seeds:
            word += f": too few seeds ({self.seeds[0]} and {self.seeds[1]}; a verdict needs {MIN_DECISIVE_SEEDS} a side)"
        if self.higher_is_better and self.outcome in (Outcome.FASTER, Outcome.SLOWER):
            word = "better" if self.outcome == Outcome.FASTER else "worse"
        notes = [f"±{self.margin:.0%} margin" + (", paired by seed" if self.paired else "")]
        ca, cb = self.censored
        if ca or cb:
            cens = f"censored at the cap: {ca}/{self.seeds[0]} and {cb}/{self.seeds[1]} seeds"
            notes.append(("decided by the cap; " if self.decided_by_cap else "") + cens)
        return f"{word}: ratio {self.ratio.text(2)} ({'; '.join(notes)})"


def judge(a: Sample, b: Sample, margin: float = TIE_MARGIN, higher_is_better: bool = False) -> Judgement:
    """How `a` compares with `b` (see the module docstring). Needs at least
    MIN_DECISIVE_SEEDS seeds on each side for anything but INCONCLUSIVE."""
    if not 0 < margin < 1:
        raise ValueError(f"judge: margin must be in (0, 1), got {margin}")
    if a.n == 0 or b.n == 0:
        raise ValueError("judge: no values")
    if higher_is_better and (a.n_censored or b.n_censored):
        raise ValueError("judge: censored seeds only make sense for a lower-is-better cost")
    pair = a.paired_with(b)
    if pair is not None:
        a, b = pair
    r = ratio_ci(a.values, b.values, paired=pair is not None)
    if higher_is_better:  # b/a: a higher value of a reads as a lower ratio, as for times
        r = Interval(_inv(r.median), _inv(r.high), _inv(r.low), r.n)
    lo, hi = 1.0 - margin, 1.0 + margin
    if min(a.n, b.n) < MIN_DECISIVE_SEEDS:
        outcome = Outcome.INCONCLUSIVE
    elif r.high < lo:
        outcome = Outcome.FASTER
    elif r.low > hi:
        outcome = Outcome.SLOWER
    elif lo <= r.low and r.high <= hi:
        outcome = Outcome.TIED
    else:
        outcome = Outcome.INCONCLUSIVE
    ca, cb = a.n_censored, b.n_censored
    # With a's censored seeds at their caps the ratio is a lower bound; with b's, an upper bound.
    allowed = {Outcome.INCONCLUSIVE}
    if ca and cb:
        pass
    elif ca:
        allowed.add(Outcome.SLOWER)
    elif cb:
        allowed.add(Outcome.FASTER)
    else:
        allowed = set(Outcome)
    if outcome not in allowed:
        outcome = Outcome.INCONCLUSIVE
    by_cap = bool(ca or cb) and outcome in (Outcome.FASTER, Outcome.SLOWER)
    if higher_is_better:  # report the ratio as a / b
        r = Interval(_inv(r.median), _inv(r.high), _inv(r.low), r.n)
    return Judgement(outcome, r, margin, by_cap, (ca, cb), (a.n, b.n), higher_is_better, pair is not None)


def _inv(x: float) -> float:
    return math.inf if x == 0 else 1.0 / x


class Claimed(str, Enum):
    """What a literature claim asserts about a against b."""
    BEATS = "beats"   # a is faster (better)
    TIES = "ties"     # a and b are tied


class ClaimVerdict(str, Enum):
    CONFIRMED = "confirmed"
    NOT_CONFIRMED = "not confirmed"
    INCONCLUSIVE = "inconclusive"
    NOT_TESTED = "not tested"

    def __str__(self) -> str:
        return self.value


def claim_verdict(claimed: Claimed, outcome: Outcome) -> ClaimVerdict:
    """A claim is confirmed only by the outcome it asserts; the other decided
    outcomes refute it (a tie refutes "beats", and a difference beyond the
    margin refutes "ties"); INCONCLUSIVE stays inconclusive."""
    if outcome == Outcome.INCONCLUSIVE:
        return ClaimVerdict.INCONCLUSIVE
    wanted = Outcome.FASTER if claimed == Claimed.BEATS else Outcome.TIED
    return ClaimVerdict.CONFIRMED if outcome == wanted else ClaimVerdict.NOT_CONFIRMED
