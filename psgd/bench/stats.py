"""The statistics behind `psgd bench convergence` and `psgd tune staleness`.

Everything here is pure (no I/O, no clocks) and deterministic:

- `median_ci`: the median of a few seeds' values and a 95% percentile-bootstrap
  confidence interval for it (a seeded numpy Generator, so the same sample
  always gives the same interval). A run that never reached its target counts
  as +inf: it sorts last, so an interval may end at inf ("not reached in some
  resamples"), which is the honest answer.
- `ratio_ci`: the interval of the ratio of two medians, on which every
  verdict rests (psgd.bench.verdict.judge, with the margin TIE_MARGIN).
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


def ratio_ci(a: Sequence[float], b: Sequence[float], level: float = CI_LEVEL,
             resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, paired: bool = False) -> Interval:
    """median(a) / median(b) with a percentile-bootstrap interval: each side
    resampled on its own, or, `paired` (a[i] and b[i] ran with the same seed),
    the same seeds drawn for both, so what the seeds share cancels. A ratio
    involving a never-reached (inf) median is inf; inf / inf is unknown and
    counts as inf, so it can never look like a tie."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0:
        raise ValueError("ratio_ci: no values")

    def ratio(num, den):
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
        return np.where(np.isnan(r), np.inf, r)

    med = float(ratio(np.median(x), np.median(y)))
    if x.size < 2 or y.size < 2:
        return Interval(med, med, med, min(x.size, y.size))
    if paired and x.size != y.size:
        raise ValueError("ratio_ci: paired samples differ in length")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, x.size, size=(resamples, x.size))
    ma = _medians(x[ia])
    mb = _medians(y[ia if paired else rng.integers(0, y.size, size=(resamples, y.size))])
    rs = np.sort(ratio(ma, mb))
    alpha = (1.0 - level) / 2
    return Interval(med, float(np.quantile(rs, alpha, method="lower")),
                    float(np.quantile(rs, 1 - alpha, method="higher")), int(min(x.size, y.size)))


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

