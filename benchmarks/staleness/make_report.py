"""Writes benchmarks/staleness/report.md from the study's tune and bench outputs.

    python benchmarks/staleness/make_report.py [STUDY_RUNS]

For each straggler model: time to the held target of bsp, asp, ssp:auto and
the best fixed bound that `psgd tune staleness` recommended (its finalist
seeds), as medians with 95% bootstrap intervals (psgd.bench.stats); verdicts
by psgd.bench.verdict.judge (faster / slower / tied / inconclusive on the ratio
of medians, ±10% margin); the tuner's wall time beside one auto run.
Everything is read from the data files the study copies here (seeds.csv,
tune_seeds.csv, tuner_seconds, auto_bounds.json), not from markdown.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Optional

from psgd.bench.outcomes import RunOutcome
from psgd.bench.stats import median_ci
from psgd.bench.tune_halving import HalvingResult, recommend_bound
from psgd.bench.verdict import Sample, judge

HERE = Path(__file__).resolve().parent
CASES = {
    "fixed": "rank 3 slowed 4x for the whole run (workers.slowdown)",
    "random": "every rank delayed after each step by an exponential multiple, mean 1, of its compute time "
              "(workers.delay)",
    "transient": "rank 3 slowed 8x from 1 s to 3 s of training (workers.transient)",
}


def seeds(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    if path.exists():
        for row in csv.DictReader(open(path)):
            out.setdefault(row["label"], []).append(row)
    return out


def times(rows: list[dict]) -> list[float]:
    return [float(r["time_to_target_s"]) if r["time_to_target_s"] else math.inf for r in rows]


def bound_changes(run_dir: Path) -> tuple[int, int]:
    """(changes decided by shard 0, largest bound it used)."""
    changes = [json.loads(ln) for ln in open(run_dir / "metrics.jsonl")
               if '"setting_change"' in ln]
    mine = [c for c in changes if c.get("index") == 0]
    return len(mine), max((c["setting"]["bound"] for c in mine), default=0)


def sample(rows: list[dict]) -> Sample:
    """The seeds' times for judge; a seed that never held the target is censored at its run's length."""
    return Sample.of(times(rows), [float(r["train_time_s"]) if r["train_time_s"] else None for r in rows])


def _cell(text: str) -> Optional[float]:
    return None if text in ("", "inf") else float(text)


def tuned_bound(tuned: dict[str, list[dict]]) -> Optional[int]:
    """The bound `psgd tune staleness` recommended, recomputed by its own rule
    (psgd.bench.tune_halving.recommend_bound) from the runs in its seeds.csv."""
    outcomes = {int(label.split(":")[1]): [RunOutcome(label, int(r["seed"]), float(r["lr"]),
                                                      _cell(r["time_to_target_s"]), _cell(r["final_metric"]),
                                                      float(r["train_time_s"] or 0), int(r["examples"] or 0))
                                           for r in rows]
                for label, rows in tuned.items()}
    return recommend_bound(HalvingResult([], outcomes))[0] if outcomes else None


def case_section(case: str, runs: Path) -> tuple[list[str], str]:
    d = HERE / case
    bench = seeds(d / "seeds.csv")
    tuned = seeds(d / "tune_seeds.csv")
    best = tuned_bound(tuned)
    tuner_s = (d / "tuner_seconds").read_text().strip() if (d / "tuner_seconds").exists() else "?"
    tuner_runs = sum(len(v) for v in tuned.values())
    rows = [("bsp", bench.get("bsp", [])), ("asp", bench.get("asp", [])), ("ssp:auto", bench.get("ssp:auto", []))]
    if best is not None:
        rows.append((f"ssp:{best} (tuned)", tuned.get(f"ssp:{best}", [])))
    ivs, samples = {}, {}
    lines = [f"## {case}: {CASES[case]}", "",
             "| mode | seeds | held target | time to target (s), median [95% CI] | final accuracy, median |",
             "|---|---|---|---|---|"]
    for label, rs in rows:
        if not rs:
            lines.append(f"| {label} | 0 | — | — | — |")
            continue
        iv = median_ci(times(rs))
        ivs[label] = iv
        samples[label] = sample(rs)
        acc = statistics.median(float(r["final_metric"]) for r in rs if r["final_metric"])
        held = sum(1 for t in times(rs) if math.isfinite(t))
        lines.append(f"| {label} | {len(rs)} | {held}/{len(rs)} | {iv.text(2)} | {acc:.4f} |")
    # Bound changes of the auto runs: counted from their run directories when
    # present, and kept beside the committed report so it can be rebuilt without them.
    auto_runs = sorted((runs / f"{case}-bench" / "runs").glob("sspauto-seed*"))
    changes = [bound_changes(r) for r in auto_runs if (r / "metrics.jsonl").exists()]
    if changes:
        (d / "auto_bounds.json").write_text(json.dumps(changes))
    elif (d / "auto_bounds.json").exists():
        changes = [tuple(c) for c in json.loads((d / "auto_bounds.json").read_text())]
    lines += [""]
    if changes:
        lines.append("ssp:auto changed its bound " + ", ".join(str(n) for n, _ in changes)
                     + " times in its seeds (largest bound " + ", ".join(str(b) for _, b in changes)
                     + "); see [bound_vs_time.png](" + case + "/bound_vs_time.png).")
    auto_train = [float(r["train_time_s"]) for r in bench.get("ssp:auto", []) if r["train_time_s"]]
    lines.append(f"Tuner: `psgd tune staleness --bounds 1,2,4,8` ran {tuner_runs} runs taking {tuner_s} s of wall "
                 f"time (start-up included); the tuner's rule (psgd.bench.tune_halving.recommend_bound) picks "
                 f"s={best} from them; one ssp:auto run trains for {statistics.median(auto_train):.1f} s (median) "
                 "and needs no tuning." if auto_train else
                 f"Tuner: {tuner_runs} runs, {tuner_s} s; the tuner's rule picks s={best} from them.")
    verdict = "no verdict (missing runs)"
    if "ssp:auto" in ivs and len(ivs) == 4:
        tuned_label = rows[3][0]
        tuned_name = tuned_label.replace(" (tuned)", "")
        v = judge(samples["ssp:auto"], samples[tuned_label])
        verdict = f"auto against the tuned {tuned_name}: {v.text()}"
        others = [f"against {b}: {judge(samples['ssp:auto'], samples[b]).text()}"
                  for b in ("bsp", "asp") if b in samples]
        verdict += "; " + "; ".join(others)
    lines += ["", f"Verdict: {verdict}.", ""]
    return lines, verdict


def main(argv: list[str]) -> int:
    runs = Path(argv[1]) if len(argv) > 1 else Path("/tmp/psgd-staleness-study")
    log = (HERE / "study.log").read_text() if (HERE / "study.log").exists() else ""
    parts = ["# Adaptive staleness (`consistency.staleness: auto`) against BSP, ASP and the tuned fixed bound", "",
             "Reproduce: `benchmarks/staleness/run_study.sh` (config: [digits-cnn.yaml](digits-cnn.yaml)). "
             "Time to target is the held target of the bench (first evaluation at 0.93 test accuracy after which "
             "the next 3 stay within 0.02); n = 3 seeds per mode, so each 95% bootstrap interval of the median "
             "spans the seeds' range; verdicts by `psgd.bench.verdict.judge` (faster/slower only where the ratio "
             "interval lies beyond ±10% of 1, tied inside it, else inconclusive).", ""]
    verdicts = []
    for case in CASES:
        if (HERE / case).is_dir():
            lines, v = case_section(case, runs)
            parts += lines
            verdicts.append(f"- {case}: {v}.")
    parts += ["## Summary", ""] + verdicts + [""]
    if (HERE / "discussion.md").exists():  # hand-written reading of these numbers
        parts += [(HERE / "discussion.md").read_text().strip(), ""]
    parts += ["## Study log", "", "```", log.strip(), "```", ""]
    (HERE / "report.md").write_text("\n".join(parts))
    print(f"wrote {HERE / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
