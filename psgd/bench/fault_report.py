"""What `psgd bench faults` concludes and writes: medians with bootstrap intervals over
seeds (psgd.bench.stats), the project's one verdict rule for the storm against the
fault-free run (psgd.bench.verdict: better / worse / tied within ±10% / inconclusive, paired
by seed), whether the goodput kept clears a floor, report.md and faults.json."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from psgd.bench.fault_compare import Comparison
from psgd.bench.faults import FAULT_FREE, FAULTY, FaultBench, FaultRun
from psgd.bench.stats import Interval, median_ci
from psgd.bench.verdict import Judgement, Outcome, Sample, judge

__all__ = ["FloorVerdict", "FaultAnalysis", "analyse_faults", "fault_table", "write_fault_report", "fault_json",
           "GOODPUT_FLOOR"]

GOODPUT_FLOOR = 0.90   # the goodput the storm must keep, as a fraction of the fault-free run's


class FloorVerdict(str, Enum):
    HOLDS = "holds"                # the whole interval of the ratio is at or above the floor (>= 2 seeds)
    FAILS = "fails"                # the whole interval is below it
    INCONCLUSIVE = "inconclusive"  # it straddles the floor: these seeds cannot tell

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FaultAnalysis:
    seeds: list[int]                       # seeds whose two runs both finished
    ratios: list[float]                    # per seed: goodput under faults / fault-free
    ratio: Interval
    goodput: dict[str, Interval]           # label -> useful updates per second
    accuracy: Optional[dict[str, Interval]]  # label -> final test accuracy (None: runs not evaluated)
    loss: Optional[dict[str, Interval]]
    lost_s: Optional[Interval]             # kill -> back in the run, over every kill of every seed
    equivalent_lost_s: Optional[Interval]  # per seed: updates lost / fault-free goodput / kills
    floor: float
    verdict: FloorVerdict
    kills: int
    never_rejoined: int
    accounting_problems: list[str]
    unread_at_stop: int                    # applied pushes whose ack a worker stopped at the limit never read
    partial: int                           # seqs some shard never saw: a killed worker's push reached only others
    verdicts: dict[str, Judgement]         # "goodput", "accuracy", "loss": the storm judged against fault-free


def _ci(values: list[float]) -> Optional[Interval]:
    return median_ci(values) if values else None


def judge_floor(ratio: Interval, floor: float) -> FloorVerdict:
    """A single seed is no interval: it decides nothing."""
    if ratio.n < 2:
        return FloorVerdict.INCONCLUSIVE
    if ratio.low >= floor:
        return FloorVerdict.HOLDS
    if ratio.high < floor:
        return FloorVerdict.FAILS
    return FloorVerdict.INCONCLUSIVE


def analyse_faults(bench: FaultBench, floor: float = GOODPUT_FLOOR) -> Optional[FaultAnalysis]:
    """None when no seed has both runs finished."""
    by_seed: dict[int, dict[str, FaultRun]] = {}
    for r in bench.runs:
        by_seed.setdefault(r.seed, {})[r.label] = r
    pairs = {s: p for s, p in sorted(by_seed.items())
             if all(lbl in p and p[lbl].ok and p[lbl].goodput > 0 for lbl in (FAULT_FREE, FAULTY))}
    if not pairs:
        return None
    ratios = [p[FAULTY].goodput / p[FAULT_FREE].goodput for p in pairs.values()]
    runs = [r for p in pairs.values() for r in p.values()]
    lost = [rec.lost_s for p in pairs.values() for rec in p[FAULTY].recoveries if rec.lost_s is not None]
    equivalent = []
    for p in pairs.values():
        clean, faulty = p[FAULT_FREE], p[FAULTY]
        if faulty.kills:
            missing = (clean.goodput - faulty.goodput) * faulty.wall_time_s  # updates the storm cost
            equivalent.append(missing / clean.goodput / len(faulty.kills))
    ratio = median_ci(ratios)

    def per_label(value) -> dict[str, Interval]:
        return {lbl: median_ci([value(p[lbl]) for p in pairs.values()]) for lbl in (FAULT_FREE, FAULTY)}

    problems = [f"{r.label} seed {r.seed}: {msg}" for r in runs for a in r.accounting for msg in a.problems]

    def verdict(value, higher_is_better: bool) -> Judgement:
        seeds = list(pairs)
        return judge(Sample.of([value(p[FAULTY]) for p in pairs.values()], seeds=seeds),
                     Sample.of([value(p[FAULT_FREE]) for p in pairs.values()], seeds=seeds),
                     higher_is_better=higher_is_better)

    # Final quality only where every run of the pairs was evaluated (eval.enabled).
    scored = {key for key in ("final_test_accuracy", "final_test_loss")
              if all(isinstance(r.summary.get(key), (int, float)) for r in runs)}
    verdicts = {"goodput": verdict(lambda r: r.goodput, True)}
    quality = {}
    for name, key, higher in (("accuracy", "final_test_accuracy", True), ("loss", "final_test_loss", False)):
        if key in scored:
            verdicts[name] = verdict(lambda r, key=key: float(r.summary[key]), higher)
            quality[name] = per_label(lambda r, key=key: float(r.summary[key]))
    return FaultAnalysis(
        list(pairs), ratios, ratio, per_label(lambda r: r.goodput), quality.get("accuracy"), quality.get("loss"),
        _ci(lost), _ci(equivalent), floor, judge_floor(ratio, floor),
        sum(len(p[FAULTY].kills) for p in pairs.values()),
        sum(1 for p in pairs.values() for rec in p[FAULTY].recoveries if rec.rejoined_at is None),
        problems, sum(a.unread_at_stop for r in runs for a in r.accounting),
        sum(a.partial for r in runs for a in r.accounting), verdicts)


def _verdict_text(name: str, j: Judgement) -> str:
    """The rule's words, where a lower loss is better: 'lower' / 'higher' for faster / slower."""
    text = j.text()
    if name == "loss":
        for word, said in ((Outcome.FASTER.value, "lower"), (Outcome.SLOWER.value, "higher")):
            if text.startswith(word + ":"):
                text = said + text[len(word):]
    return f"{name} {text}"


def _iv(i: Optional[Interval], digits: int = 2, unit: str = "") -> str:
    return "n/a" if i is None else i.text(digits, unit)


def fault_table(bench: FaultBench, a: Optional[FaultAnalysis]) -> list[str]:
    """The per-run table and the conclusion, as the CLI prints it."""
    lines = [f"{'run':<11} {'seed':>4} {'kills':>5} {'updates':>8} {'wall s':>7} {'goodput/s':>10} "
             f"{'accuracy':>8} {'loss':>7} {'lost s/kill':>11} {'load':>9}  status"]
    for r in bench.runs:
        lost = [x.lost_s for x in r.recoveries if x.lost_s is not None]
        lost_text = f"{sorted(lost)[len(lost) // 2]:.2f}" if lost else "-"
        acc, loss = r.summary.get("final_test_accuracy"), r.summary.get("final_test_loss")
        lines.append(f"{r.label:<11} {r.seed:>4} {len(r.kills):>5} {r.useful_updates:>8} {r.wall_time_s:>7.1f} "
                     f"{r.goodput:>10.1f} {'-' if acc is None else f'{acc:.4f}':>8} "
                     f"{'-' if loss is None else f'{loss:.4f}':>7} {lost_text:>11} "
                     f"{r.load_avg[0]:>4.1f}-{r.load_avg[1]:<4.1f}  {'ok' if r.ok else r.reason}")
    if a is None:
        lines.append("no seed finished both runs: nothing to compare")
        return lines
    lines += [
        f"goodput under faults / fault-free: {_iv(a.ratio, 3)} over {len(a.seeds)} seed(s); "
        f"floor {a.floor:.0%}: {a.verdict}",
        "storm against fault-free: " + "; ".join(_verdict_text(k, v) for k, v in a.verdicts.items()),
        f"time lost per fault (kill -> back on every shard): median {_iv(a.lost_s, 2, ' s')}; "
        f"throughput-equivalent {_iv(a.equivalent_lost_s, 2, ' s')}",
        f"acked = applied on every shard: {'yes' if not a.accounting_problems else 'NO'}; the workers' counts "
        f"reconcile{' ' if not a.accounting_problems else ' not '}with {a.partial} push(es) a killed worker got to "
        f"some shards only and {a.unread_at_stop} ack(s) unread at the time limit",
    ]
    return lines


def fault_json(bench: FaultBench, a: Optional[FaultAnalysis]) -> dict:
    def iv(i: Optional[Interval]) -> Optional[dict]:
        return None if i is None else {"median": i.median, "low": i.low, "high": i.high, "n": i.n}

    runs = [{"label": r.label, "seed": r.seed, "run_dir": str(r.run_dir), "code": r.code, "reason": r.reason,
             "status": r.summary.get("status"), "wall_time_s": r.wall_time_s, "useful_updates": r.useful_updates,
             "goodput_per_s": r.goodput, "final_test_accuracy": r.summary.get("final_test_accuracy"),
             "final_test_loss": r.summary.get("final_test_loss"), "restarts": r.summary.get("restarts"),
             "load_avg_1min": list(r.load_avg),
             "kills": [{"t": k.t, "role": k.role, "index": k.index, "pid": k.pid} for k in r.kills],
             "recoveries": [{"kill_t": x.kill.t, "role": x.kill.role, "index": x.kill.index,
                             "restarted_at": x.restarted_at, "rejoined_at": x.rejoined_at, "lost_s": x.lost_s}
                            for x in r.recoveries],
             "accounting": [{"shard": x.shard, "applied": x.applied, "acked": x.acked,
                             "worker_pushes": x.worker_pushes, "partial": x.partial,
                             "unread_at_stop": x.unread_at_stop, "problems": list(x.problems)} for x in r.accounting]}
            for r in bench.runs]
    out = {"on": str(bench.on), "target": str(bench.target), "pairing": str(bench.pairing), "kill_every_s": bench.every_s, "planned_kills": bench.planned,
           "bench_overrides": bench.overrides, "max_time_s": bench.config.train.max_time_s,
           "mode": str(bench.config.consistency.mode), "workers": bench.config.cluster.workers,
           "shards": bench.config.cluster.num_servers, "cores": os.cpu_count(), "runs": runs}
    if a is not None:
        out["analysis"] = {
            "seeds": a.seeds, "goodput_ratios": a.ratios, "goodput_ratio": iv(a.ratio),
            "goodput_per_s": {k: iv(v) for k, v in a.goodput.items()},
            "final_test_accuracy": {k: iv(v) for k, v in (a.accuracy or {}).items()},
            "final_test_loss": {k: iv(v) for k, v in (a.loss or {}).items()},
            "lost_s_per_fault": iv(a.lost_s), "throughput_equivalent_lost_s_per_fault": iv(a.equivalent_lost_s),
            "floor": a.floor, "verdict": str(a.verdict), "kills": a.kills, "never_rejoined": a.never_rejoined,
            "accounting_problems": a.accounting_problems, "unread_at_stop": a.unread_at_stop,
            "partial_pushes": a.partial,
            "verdicts": {k: {"outcome": str(v.outcome), "ratio": iv(v.ratio), "margin": v.margin, "paired": v.paired}
                         for k, v in a.verdicts.items()}}
    return out


def comparison_json(against: str, comparisons: list[Comparison]) -> dict:
    return {"against": against, "figures": {c.key: {"simulated": c.simulated, "real": c.real, "inside": c.inside}
                                            for c in comparisons}}


def _comparison_lines(against: str, comparisons: list[Comparison]) -> list[str]:
    lines = [f"## Simulated against the real run ({against})", "",
             "| figure | simulated | real | simulated median inside the real interval |", "|---|---|---|---|"]
    for c in comparisons:
        inside = {True: "**yes**", False: "**no**", None: "n/a"}[c.inside]
        lines.append(f"| {c.name} | {c.text(c.simulated)} | {c.text(c.real)} | {inside} |")
    return [*lines, ""]


def write_fault_report(bench: FaultBench, a: Optional[FaultAnalysis], command: str, config_text: str,
                       against: Optional[tuple[str, list[Comparison]]] = None) -> Path:
    """report.md and faults.json in the bench's out dir; returns report.md's path.
    `against`: a real bench's faults.json (its path) and this simulated bench compared with it."""
    out = bench.out_dir
    out.mkdir(parents=True, exist_ok=True)
    data = fault_json(bench, a)
    if against is not None:
        data["comparison"] = comparison_json(*against)
    (out / "faults.json").write_text(json.dumps(data, indent=1) + "\n")
    cfg = bench.config
    loads = [x for r in bench.runs for x in r.load_avg]
    if bench.simulated:
        storm = (f"Storm (simulated): one {bench.target.role} (in turn) killed at "
                 f"{', '.join(f'{t:g}' for t, _ in bench.planned)} simulated seconds by the virtual cluster's failure "
                 f"model (psgd.sim.faults, sim.faults.*): the same plan and restart rules as the real storm. Both runs "
                 f"of a seed get {', '.join(bench.overrides)}; they run one after the other in one process.")
        machine = ("Clock: simulated seconds (the machine's load does not enter them; its 1-minute load average "
                   f"was {min(loads, default=0):.1f}-{max(loads, default=0):.1f}).")
    else:
        storm = (f"Storm: SIGKILL of one {bench.target.role} (in turn) at "
                 f"{', '.join(f'{t:g}' for t, _ in bench.planned)} s of training, from outside the launcher "
                 f"(pids from processes.json); the launcher restarts it. Both runs of a seed get "
                 f"{', '.join(bench.overrides)}; "
                 + ("they run side by side, so the machine's load at every moment weighs on both (and each is part "
                    "of the other's load: the storm's idle seconds leave the fault-free run a little more CPU, which "
                    "can only lower the ratio)." if str(bench.pairing) == "side-by-side" else
                    "they run one after the other, the first alternating with the seed."))
        machine = (f"Machine: {os.cpu_count()} cores, shared; 1-minute load average {min(loads, default=0):.1f}-"
                   f"{max(loads, default=0):.1f} over the runs (per run below).")
    parts = [
        f"# Goodput under a fault storm{' (SIMULATED)' if bench.simulated else ''}: {bench.target} killed every "
        f"{bench.every_s:g} s", "",
        f"Command: `{command}`", "",
        f"Workload: model `{cfg.task.model}` on `{cfg.task.dataset}`, {cfg.consistency.mode}, "
        f"{cfg.cluster.workers} workers (batch {cfg.task.batch_size}), {cfg.cluster.num_servers} shards, "
        f"training bounded by train.max_time_s={cfg.train.max_time_s:g} s "
        f"(steps_per_worker={cfg.train.steps_per_worker}).",
        storm,
        machine,
        "Goodput: updates every shard applied (a resent or duplicate push is recognised and not applied) per "
        "second of training. Time lost per fault: from the SIGKILL to the last shard registration that brought "
        "the process back; throughput-equivalent: the updates the storm cost, in seconds of fault-free goodput, "
        "per kill. Intervals: median over seeds with a 95% bootstrap interval.", "",
        "```", *fault_table(bench, a), "```", ""]
    if a is not None:
        parts += [
            "| | fault-free | under faults |", "|---|---|---|",
            f"| goodput (updates/s) | {_iv(a.goodput[FAULT_FREE], 1)} | {_iv(a.goodput[FAULTY], 1)} |",
            *(f"| final test {name} | {_iv(q[FAULT_FREE], 4)} | {_iv(q[FAULTY], 4)} |"
              for name, q in (("accuracy", a.accuracy), ("loss", a.loss)) if q is not None), "",
            f"Goodput ratio (per seed: {', '.join(f'{x:.3f}' for x in a.ratios)}): {_iv(a.ratio, 3)}; "
            f"the {a.floor:.0%} floor **{a.verdict}**.",
            "The storm against the fault-free run, by the project's verdict rule (psgd.bench.verdict: the interval "
            "of the ratio of medians, paired by seed, against a ±10% margin): "
            + "; ".join(f"**{_verdict_text(k, v)}**" for k, v in a.verdicts.items()) + ".",
            f"Kills: {a.kills}; processes that never came back: {a.never_rejoined}.",
            "Acked = applied on every shard of every run: " + (
                "yes." if not a.accounting_problems else "NO:\n" + "\n".join(f"- {p}" for p in a.accounting_problems)),
        ]
        parts.append(f"Every shard acknowledged as applied exactly the updates it applied. The workers' own count of "
                     f"the pushes they made (seqs, over every incarnation) reconciles with each shard's, "
                     f"{'with no difference left' if not a.accounting_problems else 'NOT'}: {a.partial} push(es) of "
                     f"a killed worker reached some shards only (the shard that missed it counts it as partial; its "
                     f"successor continues after that seq) and {a.unread_at_stop} applied push(es), at most one per "
                     "worker, were in flight when train.max_time_s stopped their worker, which stopped waiting "
                     "for the ack.")
        parts.append("")
    if against is not None:
        parts += _comparison_lines(*against)
    parts += ["Resolved base config:", "", "```yaml", config_text.rstrip(), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
