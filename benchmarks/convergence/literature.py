"""The literature claims the convergence study tests, each judged from the
intervals: *confirmed*, *not confirmed* or *inconclusive*, with the evidence.
Used by verdicts.py; the case names are those run_study.sh runs.

Every comparison is psgd.bench.verdict.judge (faster / slower / tied /
inconclusive from the interval of the ratio of medians and the ±TIE_MARGIN
margin, seeds that never held the target censored at their run's end), and
claim_verdict turns it into the claim's verdict: a "beats" claim is confirmed
only by FASTER, a "ties" claim only by TIED; the other decided outcome refutes
it, and overlap confirms nothing. A verdict that rests on censored seeds says
"decided by the cap" in its evidence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from psgd.bench.outcomes import ModeStats
from psgd.bench.stats import Interval
from psgd.bench.verdict import Claimed, ClaimVerdict, Sample, claim_verdict, judge

__all__ = ["Claim", "judge_beats", "judge_ties", "judge_final_ties", "study_verdicts"]


@dataclass(frozen=True)
class Claim:
    claim: str
    source: str
    verdict: ClaimVerdict
    evidence: str


def _iv(iv: Optional[Interval], unit: str) -> str:
    return "—" if iv is None else iv.text(3 if not unit else 2, unit)


def judge_beats(winner: ModeStats, loser: ModeStats, unit: str = " s", lower_is_better: bool = True
                ) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`winner` reaches the target sooner than `loser`" (or, with
    `time`/`times`/`caps` holding another per-seed measure in `unit`, does better on it)."""
    j = judge(winner.sample(), loser.sample(), higher_is_better=not lower_is_better)
    return claim_verdict(Claimed.BEATS, j.outcome), f"{_iv(winner.time, unit)} vs {loser.label} {_iv(loser.time, unit)}, {j.text()}"


def judge_ties(a: ModeStats, b: ModeStats, unit: str = " s") -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a` ties `b`": the interval of median(a) / median(b) inside the margin."""
    j = judge(a.sample(), b.sample())
    return claim_verdict(Claimed.TIES, j.outcome), f"{_iv(a.time, unit)} vs {b.label} {_iv(b.time, unit)}, {j.text()}"


def judge_final_ties(a: ModeStats, b: ModeStats, higher_is_better: bool) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a`'s final metric ties `b`'s" (per-seed finals, ratio inside the margin)."""
    if not a.finals or not b.finals:
        return ClaimVerdict.NOT_TESTED, "no final metric recorded"
    j = judge(Sample.of(a.finals), Sample.of(b.finals), higher_is_better=higher_is_better)
    return (claim_verdict(Claimed.TIES, j.outcome),
            f"final {_iv(a.final, '')} vs {b.label} {_iv(b.final, '')}, {j.text()}")


def _pair(cases: dict[str, dict[str, ModeStats]], case: str, a: str, b: str):
    s = cases.get(case, {})
    return s.get(a), s.get(b)


def _combine(verdicts: list[ClaimVerdict]) -> ClaimVerdict:
    """One verdict for a claim tested several times (e.g. every SSP bound)."""
    verdicts = [v for v in verdicts if v != ClaimVerdict.NOT_TESTED]
    if not verdicts:
        return ClaimVerdict.NOT_TESTED
    if all(v == ClaimVerdict.CONFIRMED for v in verdicts):
        return ClaimVerdict.CONFIRMED
    if all(v == ClaimVerdict.NOT_CONFIRMED for v in verdicts):
        return ClaimVerdict.NOT_CONFIRMED
    return ClaimVerdict.INCONCLUSIVE   # some inconclusive, or mixed across bounds/cases: the evidence lists each


def study_verdicts(cases: dict[str, dict[str, ModeStats]], workload: str, higher_is_better: bool,
                   none: str = "none", straggler: str = "straggler", delay: str = "delay",
                   heavy_tail: Optional[str] = None) -> list[Claim]:
    """`cases`: heterogeneity case -> mode label -> stats, for one workload. `heavy_tail`:
    a case of heavy-tailed (Pareto) delays, judged apart from `delay` when given."""
    out = []

    def time_claim(claim, source, case_names, a, b, judge):
        verdicts, ev = [], []
        for case in case_names:
            for label in a:
                x, y = _pair(cases, case, label, b)
                if x is None or y is None:
                    continue
                v, evidence = judge(x, y)
                verdicts.append(v)
                ev.append(f"{case}: {label} {evidence} -> {v}")
        out.append(Claim(f"{workload}: {claim}", source, _combine(verdicts),
                         "; ".join(ev) or "the modes were not run in this case"))

    ssp = sorted({label for s in cases.values() for label in s if label.startswith("ssp:") and "+" not in label},
                 key=lambda s: int(s.split(":")[1]))
    time_claim("SSP ties BSP without a straggler (time to target)", "Ho et al. 2013; Cui et al. 2014",
               [none], ssp, "bsp", judge_ties)
    # A persistent straggler and random per-step delays are judged apart: a bound
    # absorbs delays that come and go, but not a rank that is always slower.
    time_claim("SSP beats BSP with a persistent straggler (time to target)", "Ho et al. 2013; Cui et al. 2014",
               [straggler], ssp, "bsp", judge_beats)
    time_claim("SSP beats BSP under random per-step delays (time to target)", "Ho et al. 2013; Cui et al. 2014",
               [delay], ssp, "bsp", judge_beats)
    if heavy_tail:
        time_claim("SSP beats BSP under heavy-tailed per-step delays (time to target)",
                   "Ho et al. 2013; Cui et al. 2014", [heavy_tail], ssp, "bsp", judge_beats)
    backups = sorted({label for s in cases.values() for label in s if label.startswith("bsp+b")})
    time_claim("backup workers shorten BSP's time to target under a persistent straggler", "Chen et al. 2016",
               [straggler], backups, "bsp", judge_beats)
    time_claim("backup workers shorten BSP's time to target under random per-step delays", "Chen et al. 2016",
               [delay], backups, "bsp", judge_beats)
    if heavy_tail:
        time_claim("backup workers shorten BSP's time to target under heavy-tailed per-step delays",
                   "Chen et al. 2016", [heavy_tail], backups, "bsp", judge_beats)
    time_claim("DC-ASGD beats plain ASP (time to target)", "Zheng et al. 2017",
               list(cases), ["asp+dc"], "asp", judge_beats)

    # Staleness-aware steps: asp+sa's final metric ties BSP's (a difference beyond the margin either way
    # refutes "keeps it near"; runs that stop at the target or the cap end at different points).
    verdicts, ev = [], []
    for case, s in cases.items():
        a, b = s.get("asp+sa"), s.get("bsp")
        if a is None or b is None:
            continue
        v, evidence = judge_final_ties(a, b, higher_is_better)
        verdicts.append(v)
        ev.append(f"{case}: asp+sa {evidence} -> {v}")
    out.append(Claim(f"{workload}: staleness-aware ASP keeps its final metric near BSP's", "Zhang et al. 2016",
                     _combine(verdicts), "; ".join(ev) or "the modes were not run"))
    return out
