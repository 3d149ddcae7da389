"""The literature claims about local updates (local SGD, GEO-SGD, DiLoCo) that
the convergence study tests on its local-update group (run_study.sh's
LOCAL_MODES, in the <workload>-local-<case> directories), each judged from the
seeds' intervals: *confirmed*, *not confirmed* or *inconclusive*, with the
evidence. Used by verdicts.py.

Besides the time to target, these claims need two quantities per seed, both
from its seeds.csv row at the mode's chosen rate:

- examples to target: the training examples behind the updates applied by the
  held target, examples/s x time to target (the run's mean rate, so an
  estimate where the rate changes within a run); a step of one worker is one
  batch, so this counts steps in batches;
- bytes to target: what the workers pushed by then, wire bytes per example x
  examples to target.

A never-reached target is inf for both, censored at what the seed spent by
its run's end (examples/s x its run length) where the row says how long it
ran. Every comparison is psgd.bench.verdict.judge: "fewer"/"more" claims are
confirmed only by FASTER, ties only by TIED. "Far fewer bytes" means at most
half of BSP's (FAR_FEWER): confirmed when judge says FASTER and the ratio's
interval lies at or below FAR_FEWER, not confirmed when it says TIED or SLOWER
or its (uncensored) ratio interval lies wholly above FAR_FEWER, inconclusive
otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from literature import Claim, _combine  # this script's sibling (run as a file, from any directory)

from psgd.bench.stats import Interval, median_ci
from psgd.bench.verdict import Claimed, ClaimVerdict, Judgement, Outcome, Sample, claim_verdict, judge

__all__ = ["SeedRow", "FAR_FEWER", "judge_far_fewer_bytes", "judge_fewer_examples", "judge_examples_tie",
           "judge_faster_epochs", "local_verdicts", "local_table"]

FAR_FEWER = 0.5  # "far fewer bytes": at most half of the baseline's


@dataclass(frozen=True)
class SeedRow:
    """One run at its mode's chosen rate, as seeds.csv gives it."""
    label: str
    seed: int
    time_to_target_s: float                   # inf: not reached
    final_metric: Optional[float]
    examples_per_s: Optional[float]
    wire_bytes_per_example: Optional[float]   # None in CSVs written before the column existed
    train_time_s: Optional[float] = None      # the run's length: where a not-reached seed's costs are censored

    @property
    def examples_to_target(self) -> Optional[float]:
        if math.isinf(self.time_to_target_s):
            return math.inf
        return None if self.examples_per_s is None else self.examples_per_s * self.time_to_target_s

    @property
    def bytes_to_target(self) -> Optional[float]:
        n = self.examples_to_target
        if n is None or self.wire_bytes_per_example is None:
            return None
        return math.inf if math.isinf(n) else self.wire_bytes_per_example * n

    @property
    def examples_spent(self) -> Optional[float]:
        """Examples behind the run by its end (the cap of a censored examples-to-target)."""
        if self.examples_per_s is None or self.train_time_s is None:
            return None
        return self.examples_per_s * self.train_time_s

    @property
    def bytes_spent(self) -> Optional[float]:
        n = self.examples_spent
        return None if n is None or self.wire_bytes_per_example is None else self.wire_bytes_per_example * n


def _values(rows: Sequence[SeedRow], field: str) -> Optional[list[float]]:
    v = [getattr(r, field) for r in rows]
    return None if not v or any(x is None for x in v) else v


def _text(iv: Optional[Interval], scale: float, unit: str, digits: int = 1) -> str:
    if iv is None:
        return "—"
    return Interval(iv.median / scale, iv.low / scale, iv.high / scale, iv.n).text(digits, unit)


def _ci(rows: Sequence[SeedRow], field: str) -> Optional[Interval]:
    v = _values(rows, field)
    return None if v is None else median_ci(v)


_CAP = {"examples_to_target": "examples_spent", "bytes_to_target": "bytes_spent"}


def _sample(rows: Sequence[SeedRow], field: str) -> Sample:
    """The rows' `field` for judge, a not-reached seed censored at what it spent by its end."""
    return Sample.of([getattr(r, field) for r in rows],
                     [getattr(r, _CAP[field]) if field in _CAP else None for r in rows], [r.seed for r in rows])


def _beats(a: Sample, b: Sample) -> tuple[ClaimVerdict, Judgement]:
    """a lower than b, by judge."""
    j = judge(a, b)
    return claim_verdict(Claimed.BEATS, j.outcome), j


def judge_far_fewer_bytes(a: Sequence[SeedRow], b: Sequence[SeedRow]) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a` reaches the target with at most FAR_FEWER of `b`'s bytes"."""
    x, y = _values(a, "bytes_to_target"), _values(b, "bytes_to_target")
    if x is None or y is None:
        return ClaimVerdict.NOT_TESTED, "no wire bytes recorded"
    j = judge(_sample(a, "bytes_to_target"), _sample(b, "bytes_to_target"))
    r = j.ratio
    if j.outcome == Outcome.FASTER and r.high <= FAR_FEWER:
        verdict = ClaimVerdict.CONFIRMED
    elif j.outcome in (Outcome.TIED, Outcome.SLOWER) or (j.outcome == Outcome.FASTER and not j.censored[1]
                                                          and r.low > FAR_FEWER):
        verdict = ClaimVerdict.NOT_CONFIRMED
    else:
        verdict = ClaimVerdict.INCONCLUSIVE
    return verdict, (f"{_text(median_ci(x), 1e6, ' MB')} vs {b[0].label} {_text(median_ci(y), 1e6, ' MB')} to the "
                     f"target, {j.text()} (far fewer: at most {FAR_FEWER:g}), bytes/example "
                     f"{_text(_ci(a, 'wire_bytes_per_example'), 1, '', 0)} vs {_text(_ci(b, 'wire_bytes_per_example'), 1, '', 0)}")


def _examples(a: Sequence[SeedRow], b: Sequence[SeedRow]) -> tuple[Optional[list[float]], Optional[list[float]], str]:
    x, y = _values(a, "examples_to_target"), _values(b, "examples_to_target")
    ev = "" if x is None or y is None else \
        f"{_text(median_ci(x), 1e3, 'k')} vs {b[0].label} {_text(median_ci(y), 1e3, 'k')} examples to the target"
    return x, y, ev


def judge_fewer_examples(a: Sequence[SeedRow], b: Sequence[SeedRow]) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a` needs fewer examples (steps) than `b` to hold the target"."""
    x, y, ev = _examples(a, b)
    if x is None:
        return ClaimVerdict.NOT_TESTED, "examples/s not recorded"
    verdict, j = _beats(_sample(a, "examples_to_target"), _sample(b, "examples_to_target"))
    return verdict, f"{ev}, {j.text()}"


def judge_examples_tie(a: Sequence[SeedRow], b: Sequence[SeedRow]) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a` needs as many examples as `b`" (judge says TIED)."""
    x, y, ev = _examples(a, b)
    if x is None:
        return ClaimVerdict.NOT_TESTED, "examples/s not recorded"
    j = judge(_sample(a, "examples_to_target"), _sample(b, "examples_to_target"))
    return claim_verdict(Claimed.TIES, j.outcome), f"{ev}, {j.text()}"


def judge_faster_epochs(a: Sequence[SeedRow], b: Sequence[SeedRow], higher_is_better: bool) -> tuple[ClaimVerdict, str]:
    """(verdict, evidence) for "`a` takes less time per epoch than `b` at equal quality": judge says
    its seconds per example are FASTER, and its final metric TIED with b's."""
    ra, rb, fa, fb = (_values(a, "examples_per_s"), _values(b, "examples_per_s"),
                      _values(a, "final_metric"), _values(b, "final_metric"))
    if ra is None or rb is None or fa is None or fb is None:
        return ClaimVerdict.NOT_TESTED, "examples/s or final metric not recorded"
    sa, sb = [r.seed for r in a], [r.seed for r in b]
    speed, js = _beats(Sample.of([1.0 / v for v in ra], seeds=sa), Sample.of([1.0 / v for v in rb], seeds=sb))  # s/example
    jq = judge(Sample.of(fa, seeds=sa), Sample.of(fb, seeds=sb), higher_is_better=higher_is_better)
    quality = claim_verdict(Claimed.TIES, jq.outcome)
    parts = {speed, quality}
    verdict = (ClaimVerdict.CONFIRMED if parts == {ClaimVerdict.CONFIRMED} else ClaimVerdict.NOT_CONFIRMED
               if ClaimVerdict.NOT_CONFIRMED in parts else ClaimVerdict.INCONCLUSIVE)
    return verdict, (f"examples/s {_text(median_ci(ra), 1, '', 0)} vs {b[0].label} {_text(median_ci(rb), 1, '', 0)} "
                     f"-> time per example {js.text()}: {speed}; final metric {_text(median_ci(fa), 1, '', 3)} vs "
                     f"{_text(median_ci(fb), 1, '', 3)}, {jq.text()}: {quality}")


def _h(label: str) -> Optional[int]:
    """H of a local-update label (bsp+h8+diloco -> 8), None for other modes."""
    for part in label.split("+")[1:]:
        if part[:1] == "h" and part[1:].isdigit():
            return int(part[1:])
    return None


def local_verdicts(cases: dict[str, dict[str, list[SeedRow]]], workload: str, higher_is_better: bool) -> list[Claim]:
    """`cases`: case -> label -> that mode's seed rows (chosen rate), for one workload's local group."""
    out = []
    labels = [lab for rows in cases.values() for lab in rows]
    hs = sorted({h for h in map(_h, labels) if h is not None})

    def claim(text, source, pairs, judge):
        verdicts, ev = [], []
        for case, rows in cases.items():
            for a, b in pairs:
                if a in rows and b in rows:
                    v, evidence = judge(rows[a], rows[b])
                    verdicts.append(v)
                    ev.append(f"{case}: {a} {evidence} -> {v}")
        out.append(Claim(f"{workload}: {text}", source, _combine(verdicts),
                         "; ".join(ev) or "the modes were not run"))

    claim("local SGD and DiLoCo reach BSP's target with far fewer bytes pushed (at most half)",
          "Douillard et al. 2023", [(f"bsp+h{h}{d}", "bsp") for h in hs for d in ("", "+diloco")],
          judge_far_fewer_bytes)
    claim("naive asynchronous DiLoCo needs more examples (steps) to the target than synchronous DiLoCo",
          "Liu et al. 2024", [(f"bsp+h{h}+diloco", f"asp+h{h}+diloco") for h in hs], judge_fewer_examples)
    claim("Delayed Nesterov needs fewer examples (steps) to the target than naive asynchronous DiLoCo",
          "Liu et al. 2024", [(f"asp+h{h}+diloco+dn", f"asp+h{h}+diloco") for h in hs], judge_fewer_examples)
    claim("Delayed Nesterov closes the gap: its examples to the target tie synchronous DiLoCo's",
          "Liu et al. 2024", [(f"asp+h{h}+diloco+dn", f"bsp+h{h}+diloco") for h in hs], judge_examples_tie)
    claim("GEO-SGD takes less time per epoch than ASP at equal quality (final metric)",
          "Paddle PR #20018", [(f"asp+h{h}", "asp") for h in hs],
          lambda a, b: judge_faster_epochs(a, b, higher_is_better))
    return out


def local_table(cases: dict[str, dict[str, list[SeedRow]]], case_names: dict[str, str]) -> str:
    """Per mode and case: examples and bytes to the target and examples/s, median [95% CI]."""
    labels: list[str] = []
    for rows in cases.values():
        labels += [lab for lab in rows if lab not in labels]
    lines = ["| mode | " + " | ".join(f"{case_names.get(c, c)}: examples to target | bytes to target | examples/s"
                                       for c in cases) + " |", "|---|" + "---|---|---|" * len(cases)]
    for lab in labels:
        cells = []
        for rows in cases.values():
            r = rows.get(lab)
            cells += ["—"] * 3 if r is None else [_text(_ci(r, "examples_to_target"), 1e3, "k"),
                                                   _text(_ci(r, "bytes_to_target"), 1e6, " MB"),
                                                   _text(_ci(r, "examples_per_s"), 1, "", 0)]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
