"""The local-update claims of issue #26, judged from a case's seeds.csv with the
real study's judges (benchmarks/convergence/literature.py: judge_beats,
judge_ties, both psgd.bench.verdict.judge), on per-seed costs other than time:

- examples to target = examples/s x held time to target (the simulated runs
  stop at the target, so the rate is the run's own), and
- kB to target = wire bytes per example x examples to target / 1000,
- seconds per 1,000 examples = 1000 / examples/s (time per epoch, up to the
  epoch's size), and the final metric (accuracy; higher is better).

A seed that never held the target is censored, as it is in time: its cost is
known only to exceed what it spent by the run's end (examples/s x the run's
length), which psgd.bench.verdict.judge takes as its cap.
"""
from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from typing import Callable, Optional

from literature import Claim, _combine, judge_beats, judge_ties

from psgd.bench.outcomes import ModeStats
from psgd.bench.stats import median_ci
from psgd.bench.verdict import ClaimVerdict

__all__ = ["seed_rows", "cost_stats", "local_update_verdicts"]

Cost = Callable[[dict], float]


def _f(text: str) -> float:
    return math.inf if text in ("", "inf", None) else float(text)


def examples_to_target(r: dict) -> float:
    return _f(r["examples_per_s"]) * _f(r["time_to_target_s"])


def kb_to_target(r: dict) -> float:
    per = r.get("wire_bytes_per_example", "")
    return math.nan if per in ("", None) else float(per) * examples_to_target(r) / 1000


def final_metric(r: dict) -> float:
    return _f(r["final_metric"])


def seconds_per_1k_examples(r: dict) -> float:
    rate = _f(r["examples_per_s"])
    return 1000.0 / rate if rate > 0 else math.inf


def seed_rows(seeds_csv: Path) -> dict[str, list[dict]]:
    """label -> its rows at the chosen learning rate."""
    out: dict[str, list[dict]] = {}
    for r in csv.DictReader(open(seeds_csv)):
        if r["chosen_lr"] == "True":
            out.setdefault(r["label"], []).append(r)
    return out


def _spent(cost: Cost, r: dict) -> float:
    """What a seed that never held the target had spent of `cost` by its run's end (its cap)."""
    return cost({**r, "time_to_target_s": r["train_time_s"]})


CENSORED_COSTS = {"examples_to_target", "kb_to_target"}  # costs that run until the target is held


def cost_stats(stats: ModeStats, rows: list[dict], cost: Cost) -> Optional[ModeStats]:
    """`stats` with its time interval replaced by `cost`'s over the same seeds (None if a seed lacks it).
    For costs to the target a seed that never held it is censored at what it spent by its end; for the
    others (final metric, s per 1,000 examples) every seed needs a finite value."""
    values = [cost(r) for r in rows]
    if not values or any(math.isnan(v) for v in values):
        return None
    if cost.__name__ in CENSORED_COSTS:
        caps = tuple(_spent(cost, r) if math.isinf(v) else v for r, v in zip(rows, values))
    elif any(math.isinf(v) for v in values):
        return None
    else:
        caps = tuple(values)
    return dataclasses.replace(stats, time=median_ci(values), times=tuple(values), caps=caps)


def local_update_verdicts(stats: dict[str, ModeStats], rows: dict[str, list[dict]], where: str,
                          h: int) -> list[Claim]:
    """Claims judged on the no-straggler case: `stats` from verdicts.load_case, `rows` from seed_rows."""
    out = []
    sync, naive, dn = f"bsp+h{h}+diloco", f"asp+h{h}+diloco", f"asp+h{h}+diloco+dn"

    def claim(text, source, pairs, judge, cost, unit):
        verdicts, ev = [], []
        for a, b in pairs:
            if a not in stats or b not in stats:
                continue
            x, y = cost_stats(stats[a], rows[a], cost), cost_stats(stats[b], rows[b], cost)
            if x is None or y is None:
                continue
            v, evidence = judge(x, y, unit)
            verdicts.append(v)
            ev.append(f"{a} {evidence} -> {v}")
        out.append(Claim(f"{where}: {text}", source, _combine(verdicts), "; ".join(ev) or "the modes were not run"))

    claim("local SGD and DiLoCo reach BSP's target with far fewer bytes", "Douillard et al. 2023",
          [(f"bsp+h{h}", "bsp"), (sync, "bsp")], judge_beats, kb_to_target, " kB")
    claim("naive asynchronous local updates need more steps than synchronous ones (examples to target)",
          "Liu et al. 2024", [(sync, naive)], judge_beats, examples_to_target, " ex")
    claim("Delayed Nesterov closes that gap (examples to target tie synchronous DiLoCo's)", "Liu et al. 2024",
          [(dn, sync)], judge_ties, examples_to_target, " ex")
    # Where neither asynchronous variant holds the target, the last accuracy still says whether DN helps.
    claim("Delayed Nesterov does better than naive asynchronous DiLoCo (final accuracy; runs stop at the target)",
          "Liu et al. 2024", [(dn, naive)], lambda a, b, unit: judge_beats(a, b, unit, lower_is_better=False),
          final_metric, "")
    # GEO: faster per epoch, at equal quality (it must hold the target in as many seeds as ASP).
    geo = f"asp+h{h}"
    claim("GEO-SGD takes less time per epoch than ASP (s per 1,000 examples)", "Paddle PR #20018",
          [(geo, "asp")], judge_beats, seconds_per_1k_examples, " s")
    if geo in stats and "asp" in stats:
        g, a = stats[geo], stats["asp"]
        v = ClaimVerdict.CONFIRMED if g.reached >= a.reached else ClaimVerdict.NOT_CONFIRMED
        out.append(Claim(f"{where}: GEO-SGD reaches ASP's quality (holds the target in as many seeds)",
                         "Paddle PR #20018", v, f"{geo} held {g.reached}/{g.seeds}, asp {a.reached}/{a.seeds}; "
                         f"time to target {g.time.text(2, ' s')} vs asp {a.time.text(2, ' s')} -> {v}"))
    return out
