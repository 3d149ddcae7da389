"""The simulated scale study's report, from what study.py wrote here:

    python benchmarks/convergence-sim/report.py benchmarks/convergence-sim

reads design.json (grids, chosen rates, caps) and w<W>-<case>/seeds.csv (one bench
a case, every mode in it),
judges every mode against bsp with the one rule (psgd.bench.verdict.judge,
paired by seed, censored seeds at their cap) and writes report.md: the
conclusion first, in words taken from the verdicts, then the results table,
the caps with the verdicts each decided, the rates, and what did not run.
Rows above VALIDATED_W workers are labelled extrapolation.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import yaml

from psgd.bench.verdict import Judgement, Outcome, Sample, judge

__all__ = ["load_case", "judge_case", "identical_modes", "conclusion", "not_run", "main"]

VALIDATED_W = 16   # the largest W checked against real runs (benchmarks/sim-validation)
DESIGN_W = (4, 16, 64, 256)   # the worker counts the study is designed for (study.py's default)
BASELINE = "bsp"
CASE_TITLES = {"none": "no straggler", "straggler": "the last rank 4× slower"}
TIME_MODEL = ("time model: the per-link one (no `sim.hosts`): every worker and shard has a link of its own and "
              "the only CPU charged is a shard's service; the host model was not used because it replaces the "
              "stated link and request costs (the knobs the sensitivity sweep varies) with a host profile's "
              "measured ones")


def load_case(case_dir: Path, modes: list[str]) -> dict[str, Sample]:
    """mode -> its seeds' held times (censored at the run's length where not held)."""
    path = case_dir / "seeds.csv"
    if not path.is_file():
        return {}
    all_rows = list(csv.DictReader(open(path)))
    out = {}
    for m in modes:
        rows = [r for r in all_rows if r["label"] == m]
        if not rows:
            continue
        out[m] = Sample.of([float(r["time_to_target_s"]) if r["time_to_target_s"] else math.inf for r in rows],
                           caps=[float(r["train_time_s"]) for r in rows], seeds=[int(r["seed"]) for r in rows])
    return out


def judge_case(samples: dict[str, Sample]) -> dict[str, Judgement]:
    """mode -> its verdict against the baseline (modes other than it)."""
    if BASELINE not in samples:
        return {}
    return {m: judge(s, samples[BASELINE]) for m, s in samples.items() if m != BASELINE}


def identical_modes(samples: dict[str, Sample]) -> list[list[str]]:
    """Groups of modes whose every seed gave the same held time (the same run)."""
    groups: list[list[str]] = []
    for m, s in samples.items():
        for g in groups:
            if samples[g[0]].paired_with(s) and sorted(zip(samples[g[0]].seeds, samples[g[0]].values)) == \
                    sorted(zip(s.seeds, s.values)):
                g.append(m)
                break
        else:
            groups.append([m])
    return [g for g in groups if len(g) > 1]


def _median(s: Sample) -> str:
    vals = sorted(s.values)
    n = len(vals)
    med = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
    return f"{med:.2f}" + (" (censored)" if s.n_censored * 2 > n else "")


def _word(j: Judgement) -> str:
    return j.outcome.value + (" (decided by the cap)" if j.decided_by_cap else "")


def conclusion(verdicts: dict[tuple[int, str], dict[str, Judgement]]) -> list[str]:
    """One line per (case, mode): its verdict against bsp at each W, grouped."""
    lines = []
    cases = sorted({c for _, c in verdicts}, key=list(CASE_TITLES).index)
    for c in cases:
        ws = sorted(w for w, cc in verdicts if cc == c)
        modes = list(dict.fromkeys(m for w in ws for m in verdicts[(w, c)]))
        for m in modes:
            by: dict[str, list[int]] = {}
            for w in ws:
                if m in verdicts[(w, c)]:
                    by.setdefault(_word(verdicts[(w, c)][m]), []).append(w)
            parts = [f"{v} at W = {', '.join(map(str, w))}" for v, w in by.items()]
            lines.append(f"- {CASE_TITLES[c]}: {m} against bsp: " + "; ".join(parts) + ".")
    return lines


def main(study_dir: Path) -> Path:
    design = json.loads((study_dir / "design.json").read_text())
    modes, cases = design["modes"], design["cases"]
    workload = yaml.safe_load((study_dir / "workload.yaml").read_text())
    sim = workload["sim"]
    verdicts: dict[tuple[int, str], dict[str, Judgement]] = {}
    samples: dict[tuple[int, str], dict[str, Sample]] = {}
    missing = []
    for w_text in design["workers"]:
        w = int(w_text)
        for c in cases:
            s = load_case(study_dir / f"w{w}-{c}", modes)
            missing += [f"W = {w}, {CASE_TITLES[c]}: {m}" for m in modes if m not in s]
            if s:
                samples[(w, c)] = s
                verdicts[(w, c)] = judge_case(s)
    decided = [j for v in verdicts.values() for j in v.values() if j.outcome is not Outcome.INCONCLUSIVE]
    text = ["# Simulated scale study: which consistency mode reaches the target first, by worker count", "",
            "**Every time here is simulated** (the virtual cluster, `--on sim`): real gradients, the time model's "
            f"clock. Time model: compute {sim['compute_ms']:g} ms a step with per-step jitter (lognormal CV "
            f"{sim['compute_jitter']:g}), links {sim['bandwidth_gbps']:g} Gb/s and {sim['latency_us']:g} µs, a shard "
            f"serves a request in {sim['request_us']:g} µs plus {sim['apply_gbytes_per_s']:g} GB/s of apply; "
            f"{TIME_MODEL}.", "",
            "## Conclusion", "",
            f"{len(decided)} of {sum(len(v) for v in verdicts.values())} verdicts against bsp are decisive "
            f"(≥ 3 seeds a side, the ratio's 95% interval wholly outside or inside ±10%); "
            f"{sum(j.decided_by_cap for v in verdicts.values() for j in v.values())} of them rest on seeds "
            "censored at the cap.", "", *conclusion(verdicts), ""]
    for (w, c), s in samples.items():
        for g in identical_modes(s):
            text.append(f"- W = {w}, {CASE_TITLES[c]}: {', '.join(g)} gave identical runs, seed by seed (a "
                        "bound that never made a worker wait); their verdicts are one verdict.")
    text += ["", "## Results", "",
             "| W | case | mode | lr | seeds held | time to target, median (simulated s) | ratio to bsp [95% CI] "
             "| verdict against bsp |", "|---|---|---|---|---|---|---|---|"]
    for (w, c), s in samples.items():
        rates = design["workers"][str(w)]["rates"]
        for m, smp in s.items():
            j = verdicts[(w, c)].get(m)
            r = rates.get(m, {})
            lr = f"{r.get('lr', float('nan')):g}" + (f" ({r['edge']} end)" if r.get("edge") else "")
            label = f"{w}" + (" (extrapolation)" if w > VALIDATED_W else "")
            text.append(f"| {label} | {CASE_TITLES[c]} | {m} | {lr} | {smp.n - smp.n_censored}/{smp.n} | "
                        f"{_median(smp)} | {j.ratio.text(2) if j else '—'} | {_word(j) if j else 'baseline'} |")
    text += ["", "## Caps", "",
             "Each W's cap is 3× the slowest mode's median held time at its chosen rate in the rate grid (the "
             "pilot, no straggler); a run that has not held the target by then is censored at the cap, which can "
             "make its mode slower, never faster or tied.", ""]
    for w_text, d in design["workers"].items():
        w = int(w_text)
        by_cap = sum(j.decided_by_cap for c in cases for j in verdicts.get((w, c), {}).values())
        n = sum(len(verdicts.get((w, c), {})) for c in cases)
        early = sum(c_ and v < 0.99 * d["cap_s"] for c in cases for smp in samples.get((w, c), {}).values()
                    for v, c_ in zip(smp.values, smp.censored))
        text.append(f"- W = {w}: cap {d['cap_s']:g} simulated s (grid runs {d['pilot_cap_s']:g} s); "
                    f"{by_cap} of {n} verdicts decided by the cap"
                    + (f"; {early} seeds ended before the cap without holding the target by the bench's rule "
                       "(the run stopped at a target its evaluator saw, which the next evaluations did not "
                       "hold) and are censored at their end" if early else "") + ".")
    text += ["", "## Rates", "",
             f"Each mode over a 3-point grid (×{design['grid_step']:g} apart) on {design['grid_seeds']} seeds, case "
             f"no straggler; synchronous modes centred on {design['sync_base_lr']:g} × √W, asynchronous ones on "
             f"{design['async_base_lr']:g} × √(4/W): linear scaling (× W synchronous, constant asynchronous) "
             "diverged at W = 256 in the pilot (study.py says where); a best rate at a grid's end got one more "
             "point beyond it.", ""]
    for w_text, d in design["workers"].items():
        per = ", ".join(f"{m} {r['lr']:g} of {'/'.join(f'{x:g}' for x in r['grid'])}"
                        + (f" + {r['extended_to']:g}" if r.get("extended_to") else "")
                        + (f" (still the {r['edge']} end)" if r.get("edge") else "")
                        + ("" if math.isfinite(r["median_s"]) else " (no rate held the target)")
                        for m, r in d["rates"].items())
        text.append(f"- W = {w_text}: {per}.")
    sweep = study_dir / "sensitivity"
    if sweep.is_dir():
        text += ["", "## Sensitivity", "", f"At W = {design['sweep_w']}, one knob of the time model changed at a time "
                 f"({design['sweep_seeds']} seeds); each verdict against bsp beside the stated cluster's "
                 f"({design['seeds']} seeds: with fewer seeds a verdict can be inconclusive for that alone).", ""]
        for knob in sorted(p.name for p in sweep.iterdir() if p.is_dir()):
            for c in cases:
                s = load_case(sweep / knob / f"w{design['sweep_w']}-{c}", modes)
                stated = verdicts.get((design["sweep_w"], c), {})
                for m, j in judge_case(s).items():
                    text.append(f"- {knob}, {CASE_TITLES[c]}: {m} {_word(j)}"
                                + (f" (stated: {_word(stated[m])})" if m in stated else ""))
    plots = [f"![W = {w}, {CASE_TITLES[c]}](w{w}-{c}/metric_vs_time.png)" for (w, c) in samples
             if (study_dir / f"w{w}-{c}" / "metric_vs_time.png").is_file()]
    if plots:
        text += ["", "## Plots", "", "Test loss against simulated time, each mode's median over seeds with its "
                 "min–max band (each case's bench; its report.md beside it).", "", *plots]
    gaps = not_run(design, missing, study_dir)
    if gaps:
        text += ["", "## Not run", "", *gaps]
    out = study_dir / "report.md"
    out.write_text("\n".join(text) + "\n")
    _readme_results(study_dir / "README.md", text)
    return out


def not_run(design: dict, missing: list[str], study_dir: Path) -> list[str]:
    """What the design asks for and did not run: each W without results, each (W, case, mode)
    missing, each sensitivity knob without results, and study.log's lines about the budget."""
    lines = [f"- W = {w}: no run (README.md says why)" for w in DESIGN_W if str(w) not in design["workers"]]
    lines += [f"- {m}" for m in missing]
    sweep = study_dir / "sensitivity"
    for knob in design.get("sweep", {}):
        for c in design.get("sweep_cases", []):
            if not (sweep / knob / f"w{design['sweep_w']}-{c}" / "seeds.csv").is_file():
                lines.append(f"- sensitivity {knob}, {CASE_TITLES[c]}: no run")
    log = study_dir / "study.log"
    if log.is_file():
        lines += [f"- study.log: {ln}" for ln in log.read_text().splitlines() if "budget" in ln and ": " in ln
                  and not ln.startswith("study started")]
    return lines


README_MARKS = ("<!-- results: written by report.py -->", "<!-- end of results -->")


def _readme_results(readme: Path, report: list[str]) -> None:
    """The README's results: the report's conclusion and table, between README_MARKS."""
    if not readme.is_file():
        return
    body = readme.read_text()
    start, end = body.find(README_MARKS[0]), body.find(README_MARKS[1])
    if start < 0 or end < start:
        return
    keep = report[report.index("## Conclusion") + 2:report.index("## Caps")]
    section = "\n".join([README_MARKS[0], "", *[ln for ln in keep if ln != "## Results"], README_MARKS[1]])
    readme.write_text(body[:start] + section + body[end + len(README_MARKS[1]):])


if __name__ == "__main__":
    print(f"wrote {main(Path(sys.argv[1]))}")
