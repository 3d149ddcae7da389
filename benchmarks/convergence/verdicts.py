"""The committed convergence study's analysis page, assembled from the cases'
seeds.csv files that `psgd bench convergence` wrote: per workload, a headline
table (median time to target [95% CI] and ratio to BSP per mode and case) and
the literature verdicts those intervals support (literature.py). The
local-update group (<workload>-local-<case>, run_study.sh's LOCAL_MODES) is a
section of its own, with examples and bytes to the target and the local-update
claims (literature_local.py).

    python benchmarks/convergence/verdicts.py benchmarks/convergence

reads <dir>/<workload>-<case>/seeds.csv for every such directory and writes
<dir>/verdicts.md. Everything is computed here from the CSVs; nothing is
typed in by hand.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from literature import study_verdicts  # this script's sibling (run as a file, from any directory)
from literature_local import SeedRow, local_table, local_verdicts

from psgd.bench.outcomes import ModeStats, RunOutcome, mode_stats
from psgd.config.modes import Mode

__all__ = ["load_case", "load_rows", "headline", "verdicts_page", "main", "CASE_NAMES", "LOCAL_GROUP"]

# The cases run_study.sh runs, by the suffix of their directory names.
CASE_NAMES = {"none": "no straggler", "straggler": "rank 3 slowed 4x", "delay": "random per-step delays",
              "many": "16 light workers"}
CASE_ORDER = ["none", "straggler", "delay", "many"]
LOCAL_GROUP = "-local"  # <workload>-local-<case>: the local-update modes and their baselines, run side by side


def _f(text: str):
    """A CSV cell: '' (and 'inf') mean no value, e.g. a target not reached."""
    return None if text in ("", "inf", None) else float(text)


def load_case(seeds_csv: Path) -> dict[str, ModeStats]:
    """Mode stats at each mode's chosen learning rate, from a seeds.csv."""
    rows = [r for r in csv.DictReader(open(seeds_csv)) if r["chosen_lr"] == "True"]
    outcomes = [RunOutcome(r["label"], int(r["seed"]), float(r["lr"]), _f(r["time_to_target_s"]),
                           _f(r["final_metric"]), float(r["train_time_s"] or 0), int(r["examples"] or 0))
                for r in rows]
    return mode_stats(outcomes)


def load_rows(seeds_csv: Path) -> dict[str, list[SeedRow]]:
    """Each mode's seed rows at its chosen learning rate (examples/s and wire bytes included)."""
    out: dict[str, list[SeedRow]] = {}
    for r in csv.DictReader(open(seeds_csv)):
        if r["chosen_lr"] == "True":
            ttt = _f(r["time_to_target_s"])
            out.setdefault(r["label"], []).append(SeedRow(
                r["label"], int(r["seed"]), float("inf") if ttt is None else ttt, _f(r["final_metric"]),
                _f(r.get("examples_per_s", "")), _f(r.get("wire_bytes_per_example", "")), _f(r.get("train_time_s", ""))))
    return out


def headline(cases: dict[str, dict[str, ModeStats]], names: dict[str, str] = CASE_NAMES) -> str:
    labels: list[str] = []
    for stats in cases.values():
        labels += [lab for lab in stats if lab not in labels]
    lines = ["| mode | " + " | ".join(names.get(c, c) for c in cases) + " |", "|---|" + "---|" * len(cases)]
    for lab in labels:
        cells = []
        for stats in cases.values():
            s = stats.get(lab)
            if s is None:
                cells.append("—")
                continue
            ratio = f", {s.ratio_to_bsp:.2f}× bsp" if s.ratio_to_bsp is not None and lab != Mode.BSP else ""
            cells.append(f"{s.time.text(2, ' s')}{ratio} ({s.reached}/{s.seeds} held)")
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _order(cases: dict) -> dict:
    return dict(sorted(cases.items(), key=lambda kv: CASE_ORDER.index(kv[0]) if kv[0] in CASE_ORDER else 99))


def verdicts_page(study_dir: Path) -> str:
    """Markdown for every workload (and local-update group) found in study_dir."""
    workloads: dict[str, dict[str, dict[str, ModeStats]]] = {}
    rows: dict[str, dict[str, dict[str, list[SeedRow]]]] = {}
    higher: dict[str, bool] = {}
    for d in sorted(p for p in Path(study_dir).iterdir() if (p / "seeds.csv").is_file()):
        workload, _, case = d.name.rpartition("-")
        if not workload or case == "lr":  # a learning-rate grid, not a case
            continue
        workloads.setdefault(workload, {})[case] = load_case(d / "seeds.csv")
        rows.setdefault(workload, {})[case] = load_rows(d / "seeds.csv")
        summary = list(csv.DictReader(open(d / "summary.csv"))) if (d / "summary.csv").is_file() else []
        higher[workload] = not summary or summary[0].get("metric", "accuracy") == "accuracy"
    parts = ["# Literature verdicts", "",
             "Computed by `benchmarks/convergence/verdicts.py` from each case's seeds.csv (times are the held time to "
             "target, median [95% bootstrap CI] over seeds). Every comparison is `psgd.bench.verdict.judge` on the "
             "95% interval of the ratio of the medians: *faster* where it lies wholly below 0.9, *slower* wholly "
             "above 1.1, *tied* inside [0.9, 1.1] (the ±10% margin), *inconclusive* otherwise; overlapping "
             "intervals confirm nothing. A claim that one mode beats another is *confirmed* only by *faster*, a "
             "claimed tie only by *tied*; the other decided outcome makes it *not confirmed*. A seed that never "
             "held the target is censored at its run's end: it can make its mode slower, never faster or tied, "
             "and a verdict that rests on it says *decided by the cap*.", "",
             "The `-local` sections are the local-update modes (`bsp+hH`: local SGD, `asp+hH`: GEO-SGD, "
             "`bsp+hH+diloco`: DiLoCo, `asp+hH+diloco`: naive asynchronous DiLoCo, `asp+hH+diloco+dn`: with Delayed "
             "Nesterov) measured side by side with the baselines they are compared against, each mode at the best "
             "rate of the grid of its inner optimizer. Examples to target = examples/s x time to target (a run's "
             "mean rate); bytes to target = wire bytes per example x examples to target. \"Far fewer bytes\" is "
             "judged on the ratio of the medians: *confirmed* where the verdict is *faster* and its interval lies at or "
             "below 0.5.", ""]
    for workload, cases in workloads.items():
        cases = _order(cases)
        local = workload.endswith(LOCAL_GROUP)
        parts += [f"## {workload}", "", headline(cases), ""]
        if local:
            parts += [local_table(_order(rows[workload]), CASE_NAMES), ""]
            claims = local_verdicts(_order(rows[workload]), workload, higher[workload])
        else:
            claims = study_verdicts(cases, workload, higher[workload])
        parts += ["| claim | source | verdict | evidence |", "|---|---|---|---|"]
        for c in claims:
            parts.append(f"| {c.claim.split(': ', 1)[1]} | {c.source} | **{c.verdict}** | {c.evidence} |")
        parts.append("")
    if not workloads:
        parts.append("No case directories with a seeds.csv were found.")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    study_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent
    if not study_dir.is_dir():
        print(f"{study_dir} is not a directory", file=sys.stderr)
        return 2
    out = study_dir / "verdicts.md"
    out.write_text(verdicts_page(study_dir))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
