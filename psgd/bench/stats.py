"""The statistics behind `psgd bench convergence` and `psgd tune staleness`.

Everything here is pure (no I/O, no clocks) and deterministic:

- `median_ci`: the median of a few seeds' values and a 95% percentile-bootstrap
  confidence interval for it (a seeded numpy Generator, so the same sample
  always gives the same interval). A run that never reached its target counts
  as +inf: it sorts last, so an interval may end at inf ("not reached in some
  resamples"), which is the honest answer.
- `ratio_ci`: the interval of the ratio of two sides' times (a t-interval
  on log values), on which every verdict rests (psgd.bench.verdict.judge,
  with the margin TIE_MARGIN).
- `halving_schedule`: the successive-halving plan of the tuner.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Interval", "significant", "median_ci", "TIE_MARGIN", "ratio_ci", "Rung", "halving_schedule", "schedule_runs",
           "BOOTSTRAP_RESAMPLES", "CI_LEVEL"]

BOOTSTRAP_RESAMPLES = 10_000
CI_LEVEL = 0.95
TIME_DIGITS = 3  # significant digits of a time: 0.0213 vs 0.0262 shows the ratio 1.23 printed beside it


def significant(v: float, digits: int = TIME_DIGITS) -> str:
    """`v` with `digits` significant digits, never in exponent form (0.0213, 1.08, 213)."""
    if not math.isfinite(v) or v == 0:
        return f"{v:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    return f"{v:.{decimals}f}"


@dataclass(frozen=True)
class Interval:
    """Median of `n` values with a CI_LEVEL bootstrap interval [low, high]."""
    median: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2, unit: str = "") -> str:
        def f(v: float) -> str:
            return "not reached" if math.isinf(v) else f"{v:.{digits}f}{unit}"
        return f"{f(self.median)} [{f(self.low)}, {f(self.high)}]"

    def time_text(self, unit: str = " s") -> str:
        """A time interval in significant digits (a ratio of two such times reads off them)."""
        def f(v: float) -> str:
            return "not reached" if math.isinf(v) else significant(v)
        return f"{f(self.median)} [{f(self.low)}, {f(self.high)}]{unit}"


def median_ci(values: Sequence[float], level: float = CI_LEVEL, resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = 0) -> Interval:
    """Median and percentile-bootstrap CI of the median.

    The interval's ends are order statistics of the resampled medians (the
    `lower` quantile for the low end and `higher` for the high end), so they
    are always values the median can take and never NaN when some values are
    inf. Raises ValueError on an empty sample or a NaN."""
    x = np.asarray([float(v) for v in values], dtype=float)
    if x.size == 0:
        raise ValueError("median_ci: no values")
    if np.isnan(x).any():
        raise ValueError("median_ci: NaN in the sample (use inf for 'target not reached')")
    if not 0 < level < 1:
        raise ValueError(f"median_ci: level must be in (0, 1), got {level}")
    med = float(np.median(x))
    if x.size == 1:
        return Interval(med, med, med, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    meds = np.sort(_medians(x[idx]))
    alpha = (1.0 - level) / 2
    low = float(np.quantile(meds, alpha, method="lower"))
    high = float(np.quantile(meds, 1 - alpha, method="higher"))
    return Interval(med, low, high, int(x.size))


def _medians(rows: np.ndarray) -> np.ndarray:
    """Row medians that stay inf (not NaN) where both middle values are inf."""
    s = np.sort(rows, axis=1)
    n = s.shape[1]
    if n % 2:
        return s[:, n // 2]
    a, b = s[:, n // 2 - 1], s[:, n // 2]
    out = np.where(np.isinf(b), b, (a + b) / 2)
    return np.where(np.isinf(a), a, out)


TIE_MARGIN = 0.10  # a tie claims the two medians are within ±10% of each other


def ratio_ci(a: Sequence[float], b: Sequence[float], level: float = CI_LEVEL, paired: bool = False) -> Interval:
    """The ratio a / b of two sides' typical values with a CI_LEVEL interval: a
    t-interval on the difference of mean log values (Welch's, each side's own
    spread; or, `paired` (a[i] and b[i] ran with the same seed), on the per-seed
    log ratios, so what the seeds share cancels). The point is the ratio of
    geometric means, which for log-normal seed times is the ratio of medians.

    Why not the percentile bootstrap of the ratio of medians: with the 3-5 seeds
    a study runs it undercovers. On null pairs (both sides log-normal, CV 0.2,
    ±10% margin) it decided faster or slower in 7-11% of trials at n = 3 paired
    (13.5% at n = 2), where this interval, exact for log-normal times, stays
    under 1%. Times are positive; a value <= 0 or inf leaves the ratio unknown:
    the interval is [0, inf]. `n` is the smaller side's count."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0:
        raise ValueError("ratio_ci: no values")
    if not 0 < level < 1:
        raise ValueError(f"ratio_ci: level must be in (0, 1), got {level}")
    if paired and x.size != y.size:
        raise ValueError("ratio_ci: paired samples differ in length")
    n = int(min(x.size, y.size))
    if (x <= 0).any() or (y <= 0).any() or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return Interval(math.nan, 0.0, math.inf, n)
    lx, ly = np.log(x), np.log(y)
    if paired:
        d = lx - ly
        mean, se, df = float(d.mean()), _se(d), d.size - 1
    else:
        mean = float(lx.mean() - ly.mean())
        vx, vy = _se(lx) ** 2, _se(ly) ** 2
        se = math.sqrt(vx + vy)
        # Welch-Satterthwaite degrees of freedom (the smaller side's n - 1 where both spreads are 0).
        df = (vx + vy) ** 2 / (vx ** 2 / max(lx.size - 1, 1) + vy ** 2 / max(ly.size - 1, 1)) \
            if vx + vy > 0 else n - 1
    if n < 2:
        return Interval(math.exp(mean), 0.0, math.inf, n)
    from scipy.special import stdtrit  # scipy takes seconds to import: only the interval needs it

    half = float(stdtrit(df, 0.5 + level / 2)) * se
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)


def _se(v: np.ndarray) -> float:
    """Standard error of the mean of v (0 for a single value)."""
    return float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


# --- successive halving ---------------------------------------------------------------


@dataclass(frozen=True)
class Rung:
    arms: int    # candidates still running in this rung
    seeds: int   # seeds each of them has in total by the end of this rung


def halving_schedule(n_arms: int, max_seeds: int, min_seeds: int = 1, eta: int = 2) -> list[Rung]:
    """Successive halving over seeds: rung 0 runs every arm with `min_seeds`
    seeds; each later rung keeps the best ceil(arms/eta) (never fewer than 2,
    so a comparison is left) and multiplies the seeds by eta, capped at
    max_seeds. Ends at the first rung with max_seeds seeds."""
    if n_arms < 1:
        raise ValueError(f"halving_schedule: need at least one arm, got {n_arms}")
    if not 1 <= min_seeds <= max_seeds:
        raise ValueError(f"halving_schedule: need 1 <= min_seeds <= max_seeds, got {min_seeds}, {max_seeds}")
    if eta < 2:
        raise ValueError(f"halving_schedule: eta must be >= 2, got {eta}")
    rungs = [Rung(n_arms, min_seeds)]
    while rungs[-1].seeds < max_seeds:
        arms = min(rungs[-1].arms, max(2, math.ceil(rungs[-1].arms / eta)))
        rungs.append(Rung(arms, min(max_seeds, rungs[-1].seeds * eta)))
    return rungs


def schedule_runs(rungs: list[Rung]) -> int:
    """How many runs the schedule costs in all (seeds are cumulative)."""
    total, prev = 0, 0
    for r in rungs:
        total += r.arms * (r.seeds - prev)
        prev = r.seeds
    return total

