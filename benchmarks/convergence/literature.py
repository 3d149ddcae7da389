"""The literature claims the convergence study tests, each judged from the
intervals: *confirmed*, *not confirmed* or *inconclusive*, with the evidence.
Used by verdicts.py; the case names are those run_study.sh runs.

A "beats" claim is confirmed when the claimed winner's interval lies entirely
on the better side, not confirmed when it lies entirely on the worse side, and
inconclusive when they overlap. A "ties" claim is a claim about the ratio of
the two medians: confirmed when the ratio's interval lies inside 1 ± TIE_MARGIN
(±10%), not confirmed when it lies wholly outside, inconclusive otherwise:
overlapping intervals alone are "indistinguishable", not "tied".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from psgd.bench.outcomes import ModeStats
from psgd.bench.stats import TIE_MARGIN, Interval, Tie, compare, judge_tie, ratio_ci

__all__ = ["Claim", "judge_beats", "judge_ties", "study_verdicts"]


@dataclass(frozen=True)
class Claim:
    claim: str
    source: str
    verdict: str      # confirmed | not confirmed | inconclusive | not tested
    evidence: str


def _iv(iv: Optional[Interval], unit: str) -> str:
    return "—" if iv is None else iv.text(3 if not unit else 2, unit)


def judge_beats(winner: ModeStats, loser: ModeStats, unit: str = " s", lower_is_better: bool = True
                ) -> tuple[str, str]:
    """(verdict, evidence) for "`winner` reaches the target sooner than `loser`" (or, with
    `time`/`times` holding another per-seed measure in `unit`, does better on it)."""
    kind = compare(winner.time, loser.time, lower_is_better).kind
    verdict = {"faster": "confirmed", "slower": "not confirmed", "indistinguishable": "inconclusive"}[kind]
    return verdict, f"{_iv(winner.time, unit)} vs {loser.label} {_iv(loser.time, unit)}"


def judge_ties(a: ModeStats, b: ModeStats, unit: str = " s") -> tuple[str, str]:
    """(verdict, evidence) for "`a` ties `b`": the interval of median(a) / median(b) inside the margin."""
    ratio = ratio_ci(a.times, b.times)
    tie = judge_tie(ratio)
    verdict = {Tie.TIED: "confirmed", Tie.NOT_TIED: "not confirmed", Tie.INCONCLUSIVE: "inconclusive"}[tie]
    return verdict, (f"{_iv(a.time, unit)} vs {b.label} {_iv(b.time, unit)}, ratio {ratio.text(2)} "
                     f"(tie margin ±{TIE_MARGIN:.0%})")


def _pair(cases: dict[str, dict[str, ModeStats]], case: str, a: str, b: str):
    s = cases.get(case, {})
    return s.get(a), s.get(b)


def _combine(verdicts: list[str]) -> str:
    """One verdict for a claim tested several times (e.g. every SSP bound)."""
    if not verdicts:
        return "not tested"
    if all(v == "confirmed" for v in verdicts):
        return "confirmed"
    if all(v == "not confirmed" for v in verdicts):
        return "not confirmed"
    return "inconclusive"   # some inconclusive, or mixed across bounds/cases: the evidence lists each


def study_verdicts(cases: dict[str, dict[str, ModeStats]], workload: str, higher_is_better: bool,
                   none: str = "none", straggler: str = "straggler", delay: str = "delay",
                   heavy_tail: Optional[str] = None) -> list[Claim]:
    """`cases`: heterogeneity case -> mode label -> stats, for one workload. `heavy_tail`:
    a case of heavy-tailed (Pareto) delays, judged apart from `delay` when given."""
    lower = not higher_is_better
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

    # Staleness-aware steps: final metric of asp+sa stays as good as BSP's.
    verdicts, ev = [], []
    for case, s in cases.items():
        a, b = s.get("asp+sa"), s.get("bsp")
        if a is None or b is None or a.final is None or b.final is None:
            continue
        kind = compare(a.final, b.final, lower).kind
        v = "not confirmed" if kind == "slower" else "confirmed"
        verdicts.append(v)
        ev.append(f"{case}: asp+sa final {_iv(a.final, '')} vs bsp {_iv(b.final, '')} -> {v}")
    out.append(Claim(f"{workload}: staleness-aware ASP keeps its final metric near BSP's", "Zhang et al. 2016",
                     _combine(verdicts), "; ".join(ev) or "the modes were not run"))
    return out
