"""The field study's report, assembled from what run_study.sh left here: each bench's
summary.csv and seeds.csv (psgd bench convergence) and runs.csv (peaks.py):

    python benchmarks/local-updates-field/report.py benchmarks/local-updates-field

writes report.md: per setting (simulated WAN, real on this machine) every mode at its
chosen rate with time to target, final accuracy, bytes per example and the peak bytes
of one push, the ratios against ASP and dense DiLoCo, and the verdicts of
psgd.bench.verdict.judge against dense DiLoCo, ASP and BSP. Nothing is typed in by hand.
"""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from psgd.bench.verdict import Sample, judge

SETTINGS = {"sim": "Simulated WAN (1 Gb/s, 10 ms one way between workers and shards), 4 workers — simulated time",
            "real": "Real processes on this machine, configs/quickstart.yaml, 4 workers — wall time"}
FAMILIES = ("sync", "async", "diloco")
DENSE, ASP, BSP = "bsp+h8+diloco", "asp", "bsp"


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(open(path))) if path.is_file() else []


def _float(x) -> float:
    return float(x) if x not in (None, "") else math.nan


def load(here: Path, setting: str) -> tuple[list[dict], dict[str, list[dict]], dict[str, list[dict]]]:
    """(summary rows at the chosen rates, each with the rates its grid tried as "grid"; seeds rows
    by label; runs rows by label at the chosen rates). The real setting's grid is its -grid bench."""
    summary, seeds, runs = [], {}, {}
    for fam in FAMILIES:
        d = here / f"{setting}-{fam}"
        chosen = {r["label"]: r["lr"] for r in _rows(d / "summary.csv")}
        grid: dict[str, set] = {}
        for r in _rows(d / "seeds.csv") + _rows(here / f"{setting}-{fam}-grid" / "seeds.csv"):
            grid.setdefault(r["label"], set()).add(_float(r["lr"]))
        summary += [{**r, "grid": sorted(grid.get(r["label"], ()))} for r in _rows(d / "summary.csv")]
        for r in _rows(d / "seeds.csv"):
            if r["chosen_lr"] == "True":
                seeds.setdefault(r["label"], []).append(r)
        for r in _rows(d / "runs.csv"):
            if r["label"] in chosen and math.isclose(_float(r["lr"]), _float(chosen[r["label"]])):
                runs.setdefault(r["label"], []).append(r)
    return summary, seeds, runs


def sample(rows: list[dict]) -> Sample:
    times = [_float(r["time_to_target_s"]) if r["time_to_target_s"] else math.inf for r in rows]
    return Sample.of(times, [_float(r["train_time_s"]) for r in rows], [int(r["seed"]) for r in rows])


def _median(xs: list[float]) -> float:
    xs = sorted(x for x in xs if not math.isnan(x))
    if not xs:
        return math.nan
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _fmt(x: float, digits: int = 2) -> str:
    return "—" if math.isnan(x) else f"{x:,.{digits}f}"


def table(summary: list[dict], runs: dict[str, list[dict]]) -> list[str]:
    by = {r["label"]: r for r in summary}
    asp_bpe = _float(by[ASP]["wire_bytes_per_example_median"]) if ASP in by else math.nan
    dense_peak = max((int(r["peak_push_bytes"]) for r in runs.get(DENSE, []) if r["peak_push_bytes"]), default=0)
    out = ["| mode | lr | held target | time to target, median [95% CI] (s) | final accuracy, median [95% CI] | "
           "examples / s | wire bytes / example | ASP's ÷ this | peak bytes of one push | dense DiLoCo's ÷ this |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        label = r["label"]
        bpe = _float(r["wire_bytes_per_example_median"])
        peaks = [int(x["peak_push_bytes"]) for x in runs.get(label, []) if x["peak_push_bytes"]]
        peak = max(peaks) if peaks else 0
        ttt = (f"{_fmt(_float(r['time_to_target_median_s']))} [{_fmt(_float(r['time_to_target_ci_low_s']))}, "
               f"{_fmt(_float(r['time_to_target_ci_high_s']))}]")
        acc = (f"{_fmt(_float(r['final_metric_median']), 4)} [{_fmt(_float(r['final_metric_ci_low']), 4)}, "
               f"{_fmt(_float(r['final_metric_ci_high']), 4)}]")
        grid = r["grid"]
        edge = " (grid's end)" if len(grid) > 1 and _float(r["lr"]) in (grid[0], grid[-1]) else ""
        out.append(f"| {label} | {r['lr']}{edge} | {r['reached']}/{r['seeds']} | {ttt} | {acc} | "
                   f"{_fmt(_float(r['examples_per_s_median']), 0)} | {_fmt(bpe, 0)} | "
                   f"{_fmt(asp_bpe / bpe, 1) + '×' if bpe else '—'} | {f'{peak:,}' if peak else '—'} | "
                   f"{_fmt(dense_peak / peak, 2) + '×' if peak and dense_peak else '—'} |")
    return out


def verdicts(seeds: dict[str, list[dict]]) -> list[str]:
    out = ["| mode | against dense DiLoCo | against ASP | against BSP |", "|---|---|---|---|"]
    for label, rows in seeds.items():
        cells = []
        for other in (DENSE, ASP, BSP):
            if other == label or other not in seeds:
                cells.append("—")
                continue
            cells.append(judge(sample(rows), sample(seeds[other])).text())
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def quorum(here: Path) -> list[str]:
    plain, q = _rows(here / "sim-quorum-straggler" / "seeds.csv"), _rows(here / "sim-quorum-straggler-q3" / "seeds.csv")
    if not plain or not q:
        return ["No quorum rows: run_study.sh runs them where `consistency.quorum` exists (see study.log)."]
    a, b = sample([r for r in q if r["chosen_lr"] == "True"]), sample([r for r in plain if r["chosen_lr"] == "True"])
    med = [_median([_float(r["time_to_target_s"]) for r in rows]) for rows in (q, plain)]
    return [f"Dense DiLoCo under a 4× straggler (rank 3), simulated: with a quorum of 3 of 4 (adaptive grace) "
            f"time to target median {_fmt(med[0])} s, without {_fmt(med[1])} s; quorum against without: "
            f"{judge(a, b).text()}."]


def main(here: Path) -> None:
    lines = ["# Local updates against the field: report", "",
             "Generated by report.py from the benches in this folder (run_study.sh). Ratios of bytes are of the "
             "medians over seeds at each mode's chosen rate; a verdict is psgd.bench.verdict.judge on the time "
             "to the held target (±10% margin, 95% bootstrap interval, paired by seed). A rate marked \"grid's "
             "end\" was the best at an end of its grid: a wider grid might move it. The all-reduce ranks report "
             "no peak push (they exchange by ring).", ""]
    for setting, title in SETTINGS.items():
        summary, seeds, runs = load(here, setting)
        lines += [f"## {title}", ""]
        if not summary:
            lines += ["No benches ran for this setting.", ""]
            continue
        lines += table(summary, runs) + ["", "Verdicts (time to the held target):", ""] + verdicts(seeds) + [""]
    lines += ["## Quorum merging (the slot for issue #40's other half)", ""] + quorum(here) + [""]
    (here / "report.md").write_text("\n".join(lines))
    print(f"wrote {here / 'report.md'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
