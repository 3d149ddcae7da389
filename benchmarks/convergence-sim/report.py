"""The simulated scale study's report, assembled from the benches' CSVs that
run_study.sh copied here (w<W>-<case>/seeds.csv, w<W>-lr-<family>/seeds.csv)
and its study.log:

    python benchmarks/convergence-sim/report.py benchmarks/convergence-sim

writes report.md (per W: the headline table, the literature verdicts and the
learning rates chosen; then how each verdict changes with W and where it
differs from the real 4-worker study in benchmarks/convergence), scale.png
(time to target against W, per case) and verdicts.png (the verdict matrix).
The judging is the real study's (benchmarks/convergence/literature.py and
verdicts.py); nothing is typed in by hand.
"""
from __future__ import annotations

import csv
import math
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "convergence"
sys.path[:0] = [str(HERE), str(REAL)]

from claims_local import local_update_verdicts, seed_rows  # noqa: E402
from literature import study_verdicts  # noqa: E402
from sweep import sensitivity_section  # noqa: E402
from verdicts import headline, load_case  # noqa: E402

from psgd.bench.stats import TIE_MARGIN  # noqa: E402
from psgd.bench.target_resolution import target_resolution_line  # noqa: E402
from psgd.config import load_config  # noqa: E402

__all__ = ["load_study", "verdict_matrix", "main"]

CASES = ["none", "straggler", "delay", "pareto"]
CASE_TITLES = {"none": "no straggler", "straggler": "the last rank slowed 4×",
               "delay": "exponential per-step delays (mean 1× compute)",
               "pareto": "Pareto per-step delays (shape 1.5, mean 1× compute)"}
CASE_HEADS = {"none": "no straggler", "straggler": "last rank slowed 4×", "delay": "exponential delays",
              "pareto": "Pareto delays"}
_CASE_DIR = re.compile(r"w(\d+)-(" + "|".join(CASES) + r")$")
_GRID_DIR = re.compile(r"w(\d+)-lr-(\w+)$")
LOCAL_H = 8


def load_study(study_dir: Path) -> dict[int, dict[str, Path]]:
    """W -> case -> its seeds.csv."""
    out: dict[int, dict[str, Path]] = {}
    for d in sorted(Path(study_dir).iterdir()):
        m = _CASE_DIR.match(d.name)
        if m and (d / "seeds.csv").is_file():
            out.setdefault(int(m.group(1)), {})[m.group(2)] = d / "seeds.csv"
    return dict(sorted(out.items()))


def claims_at(paths: dict[str, Path], w: int):
    cases = {c: load_case(paths[c]) for c in CASES if c in paths}
    claims = study_verdicts(cases, f"{w} workers", True, heavy_tail="pareto")
    if "none" in cases:
        claims += local_update_verdicts(cases["none"], seed_rows(paths["none"]), f"{w} workers", LOCAL_H)
    return cases, claims


def judge_study(study_dir: Path) -> dict[int, list]:
    """W -> its claims, for a directory laid out like the study (a sensitivity sweep point)."""
    return {w: claims_at(paths, w)[1] for w, paths in load_study(study_dir).items()}


def real_claims() -> dict[str, dict[str, str]]:
    """workload -> claim text -> verdict, from the real study's committed seeds.csv files."""
    workloads: dict[str, dict[str, dict]] = {}
    higher: dict[str, bool] = {}
    for d in sorted(p for p in REAL.iterdir() if (p / "seeds.csv").is_file()):
        workload, _, case = d.name.rpartition("-")
        # The real local-update group (<workload>-local-<case>) is judged by its own claims in verdicts.md.
        if workload and case != "lr" and not workload.endswith("-local"):
            workloads.setdefault(workload, {})[case] = load_case(d / "seeds.csv")
            summary = list(csv.DictReader(open(d / "summary.csv"))) if (d / "summary.csv").is_file() else []
            higher[workload] = not summary or summary[0].get("metric", "accuracy") == "accuracy"
    return {wl: {c.claim.split(": ", 1)[1]: c.verdict for c in study_verdicts(cases, wl, higher[wl])}
            for wl, cases in workloads.items()}


def verdict_matrix(claims_by_w: dict[int, list]) -> dict[str, dict[int, str]]:
    """claim text -> W -> verdict (in the order claims first appear)."""
    out: dict[str, dict[int, str]] = {}
    for w, claims in claims_by_w.items():
        for c in claims:
            out.setdefault(c.claim.split(": ", 1)[1], {})[w] = c.verdict
    return out


def change_with_w(by_w: dict[int, str]) -> str:
    groups: dict[str, list[int]] = {}
    for w, v in by_w.items():
        groups.setdefault(v, []).append(w)
    if len(groups) == 1:
        return f"{next(iter(groups))} at every W"
    return "; ".join(f"{v} at W = {', '.join(map(str, ws))}" for v, ws in groups.items())


def grid_lines(study_dir: Path, w: int) -> list[str]:
    """Per family: its grid and each mode's chosen rate, flagged where it sits at an end of the grid."""
    lines = []
    for d in sorted(Path(study_dir).glob(f"w{w}-lr-*")):
        if not _GRID_DIR.match(d.name) or not (d / "seeds.csv").is_file():
            continue
        rows = list(csv.DictReader(open(d / "seeds.csv")))
        rates = sorted({float(r["lr"]) for r in rows})
        chosen = {r["label"]: float(r["lr"]) for r in rows if r["chosen_lr"] == "True"}
        picks = [f"{label} {lr:g}" + (" (an end of the grid)" if lr in (rates[0], rates[-1]) else "")
                 for label, lr in chosen.items()]
        lines.append(f"{d.name.rsplit('-', 1)[1]} grid {','.join(f'{x:g}' for x in rates)}: " + ", ".join(picks))
    return lines


def plot_scale(study: dict[int, dict[str, Path]], out: Path) -> None:
    from psgd.bench.pyplot import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CASES), figsize=(4.2 * len(CASES), 4.2), sharey=True)
    colours: dict[str, str] = {}   # one colour per mode in every panel
    for ax, case in zip(axes, CASES):
        series: dict[str, list] = {}
        for w, paths in study.items():
            if case not in paths:
                continue
            for label, s in load_case(paths[case]).items():
                series.setdefault(label, []).append((w, s.time))
        top = 1.0
        for label, pts in series.items():
            if label.startswith(("bsp+h", "asp+h")):
                continue   # the local-update modes have their own claims; keep the panel readable
            ws = [w for w, iv in pts if math.isfinite(iv.median)]
            med = [iv.median for _, iv in pts if math.isfinite(iv.median)]
            lo = [iv.median - iv.low for _, iv in pts if math.isfinite(iv.median)]
            hi = [(iv.high - iv.median) if math.isfinite(iv.high) else 0 for _, iv in pts if math.isfinite(iv.median)]
            if ws:
                colour = colours.setdefault(label, f"C{len(colours) % 10}")
                ax.errorbar(ws, med, yerr=[lo, hi], marker="o", capsize=3, label=label, color=colour)
                top = max(top, max(med))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlim(min(study) / 1.6, max(study) * 1.6)
        ax.set_xticks(sorted(study))
        ax.set_xticklabels([str(w) for w in sorted(study)])
        ax.set_title(CASE_TITLES[case], fontsize=9)
        ax.set_xlabel("workers (simulated)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held time to target, simulated s (median, 95% CI)")
    handles = {}
    for ax in axes:
        handles.update(zip(*reversed(ax.get_legend_handles_labels())))
    if handles:
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=len(handles))

    fig.suptitle("Simulated scale study (digits MLP): time to target vs workers; missing point = not reached")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_verdicts(matrix: dict[str, dict[int, str]], ws: list[int], out: Path) -> None:
    from psgd.bench.pyplot import pyplot
    plt = pyplot()
    colour = {"confirmed": 2, "inconclusive": 1, "not confirmed": 0, "not tested": math.nan}
    rows = list(matrix)
    grid = [[colour.get(matrix[c].get(w, "not tested"), math.nan) for w in ws] for c in rows]
    fig, ax = plt.subplots(figsize=(5 + 1.1 * len(ws), 0.5 * len(rows) + 1.2))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=2, aspect="auto")
    for i, c in enumerate(rows):
        for j, w in enumerate(ws):
            ax.text(j, i, matrix[c].get(w, "not tested"), ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(ws)))
    ax.set_xticklabels([f"W={w}" for w in ws])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([textwrap.fill(c, 60) for c in rows], fontsize=7)
    ax.set_title("Literature verdicts by worker count (simulated)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def log_lines(study_dir: Path) -> list[str]:
    log = Path(study_dir) / "study.log"
    if not log.is_file():
        return ["(no study.log)"]
    text = log.read_text().splitlines()
    cpu = sum(float(m.group(1)) for line in text if (m := re.search(r"s wall, ([\d.]+) s CPU", line)))
    return [f"`{line}`  " for line in text if line.startswith(("study ", "commit "))] + [
        f"CPU seconds of all benches together: {cpu:.0f} s ({cpu / 60:.1f} min)."]


def main(argv: list[str]) -> int:
    study_dir = Path(argv[0]) if argv else HERE
    study = load_study(study_dir)
    cfg = load_config(str(HERE / "digits.yaml"))
    sim, t = cfg.sim, cfg.train.target
    parts = ["# Simulated scale study: the literature claims at 4 to 256 workers", "",
             "**Every time in this report is simulated** (the virtual cluster, `--on sim`): the gradients, the "
             "shards' update rules and the data are real; the clock is the time model's. Regenerate with "
             "`benchmarks/convergence-sim/run_study.sh`; README.md says what was chosen and why.", "",
             f"Workload: `{cfg.task.model}` (hidden {cfg.task.model_args.get('hidden')}) on `{cfg.task.dataset}`, "
             f"batch {cfg.task.batch_size} per worker, plain SGD, {cfg.cluster.num_servers} shards. Target: test "
             f"{t.metric} {t.value:g}, held for {t.hold_evals} evaluations within {t.tolerance:g}; runs stop "
             f"once it is held. Stated cluster: {sim.compute_ms:g} ms of compute per worker step, links of "
             f"{sim.bandwidth_gbps:g} Gb/s with {sim.latency_us:g} µs latency, a shard serves a request in "
             f"{sim.request_us:g} µs plus {sim.apply_gbps:g} GB/s of apply.", "",
             "Verdicts: every comparison is `psgd.bench.verdict.judge` on the 95% interval of the ratio of the "
             f"medians: *faster*/*slower* wholly beyond ±{TIE_MARGIN:.0%} of 1, *tied* inside it, *inconclusive* "
             "otherwise (overlap confirms nothing). A *beats* claim is confirmed only by *faster*, a *tie* claim "
             "only by *tied*. A seed that never held the target is censored at its run's end; a verdict that rests "
             "on such seeds says *decided by the cap*. Times are held time to target, median [95% bootstrap CI] "
             "over seeds.", "", target_resolution_line(cfg), ""]
    claims_by_w = {}
    for w, paths in study.items():
        cases, claims = claims_at(paths, w)
        claims_by_w[w] = claims
        parts += [f"## {w} workers", "", "Cases: " + "; ".join(f"{c} = {CASE_TITLES[c]}" for c in cases) + ".",
                  "", headline(cases, CASE_HEADS), "", "| claim | source | verdict | evidence |", "|---|---|---|---|"]
        parts += [f"| {c.claim.split(': ', 1)[1]} | {c.source} | **{c.verdict}** | {c.evidence} |" for c in claims]
        parts += ["", "Learning rates (case none, grid per family of modes): " + "; ".join(grid_lines(study_dir, w)),
                  ""]
    matrix = verdict_matrix(claims_by_w)
    ws = list(study)
    real = real_claims()
    parts += ["## How the verdicts change with W", "",
              "| claim | " + " | ".join(f"W={w}" for w in ws) + " | " +
              " | ".join(f"real 4-worker {wl}" for wl in real) + " |",
              "|---|" + "---|" * (len(ws) + len(real))]
    for claim, by_w in matrix.items():
        parts.append(f"| {claim} | " + " | ".join(by_w.get(w, "—") for w in ws) + " | "
                     + " | ".join(real[wl].get(claim, "—") for wl in real) + " |")
    parts += ["", "In words (computed from the table):", ""]
    parts += [f"- {claim}: {change_with_w(by_w)}." for claim, by_w in matrix.items()]
    if 4 in claims_by_w and real:
        differ = [f"- {claim}: simulated W=4 {by_w[4]}; real " +
                  ", ".join(f"{wl} {real[wl][claim]}" for wl in real)
                  for claim, by_w in matrix.items()
                  if 4 in by_w and any(claim in real[wl] and real[wl][claim] != by_w[4] for wl in real)]
        parts += ["", "## Where the simulated 4 workers differ from the real 4-worker study", "",
                  "Different workloads (digits MLP here, MNIST-1D CNN and a character LM there) and a different "
                  "clock (simulated, without the real study's two shared cores), so a difference says the answer "
                  "depends on them, not which is right.", ""]
        parts += differ or ["None: every claim tested in both has the same verdict."]
    parts += [""] + sensitivity_section(Path(study_dir), claims_by_w, judge_study)
    parts += ["", "![time to target vs W](scale.png)", "", "![verdicts vs W](verdicts.png)", "",
              "## The run", ""] + log_lines(study_dir)
    (Path(study_dir) / "report.md").write_text("\n".join(parts) + "\n")
    if study:
        plot_scale(study, Path(study_dir) / "scale.png")
        plot_verdicts(matrix, ws, Path(study_dir) / "verdicts.png")
    print(Path(study_dir) / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
