"""`psgd explain RUN_DIR --what-if KEY=VALUE ...`: the run, calibrated and simulated under each change.

1. Calibrate the virtual cluster on the run (psgd.sim.calibrate: its own
   compute, service and round trips), on the run's config.
2. Check the calibration: the calibrated run, simulated at the run's own seed,
   must give its time to target and its updates/s within REPRODUCE_MARGIN; the
   result says which figure it missed by how much when it does not (the changes
   are still simulated, and said to rest on a calibration that missed).
3. Simulate the calibrated baseline and each change over the same seeds, and
   judge each change against the baseline with psgd's one verdict rule
   (psgd.bench.verdict), on time to target (a seed that missed the target is
   censored at its simulated length).
Every figure here is simulated, except the run's own.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from psgd.bench.explain import run_summary
from psgd.bench.verdict import Judgement, Sample, judge
from psgd.config import Config, ConfigError, load_config

__all__ = ["Reproduction", "WhatIf", "WhatIfReport", "what_if", "REPRODUCE_MARGIN", "SEEDS"]

REPRODUCE_MARGIN = 0.25  # the calibrated simulation's own time to target and updates/s, against the run's
SEEDS = 3                # seeds per side: the fewest the verdict rule decides on (DESIGN.md §8)


@dataclass(frozen=True)
class Figures:
    time_to_target_s: Optional[float]  # None: not reached
    wall_time_s: float
    updates_per_s: float

    @classmethod
    def of(cls, summary) -> "Figures":
        wall = float(summary.get("wall_time_s") or 0.0)
        updates = float(summary.get("total_updates") or 0.0)
        return cls(summary.get("time_to_target_s"), wall, updates / wall if wall > 0 else 0.0)


@dataclass(frozen=True)
class Reproduction:
    real: Figures
    simulated: Figures
    margin: float

    def misses(self) -> list[str]:
        """Each figure the simulation missed by more than the margin, in words ([] when it reproduced)."""
        out = []
        pairs = {"updates/s": (self.real.updates_per_s, self.simulated.updates_per_s),
                 "time to target (s)": (self.real.time_to_target_s, self.simulated.time_to_target_s)}
        for name, (real, sim) in pairs.items():
            if real is None and sim is None:
                continue
            if real is None or sim is None:
                out.append(f"{name}: real {_fmt(real)}, simulated {_fmt(sim)} (reached on one side only)")
            elif real > 0 and abs(sim / real - 1) > self.margin:
                out.append(f"{name}: real {real:.3g}, simulated {sim:.3g} ({sim / real - 1:+.0%})")
        return out


def _fmt(x: Optional[float]) -> str:
    return "not reached" if x is None else f"{x:.3g}"


@dataclass(frozen=True)
class WhatIf:
    change: str
    seeds: tuple[int, ...]
    times_s: tuple[Optional[float], ...]  # simulated time to target per seed (None: not reached)
    median_updates_per_s: float
    judgement: Optional[Judgement]        # the change against the baseline, on time to target (None: the baseline)

    @property
    def median_time_s(self) -> Optional[float]:
        reached = [t for t in self.times_s if t is not None]
        return statistics.median(reached) if len(reached) == len(self.times_s) else None


@dataclass(frozen=True)
class WhatIfReport:
    run_dir: str
    calibrated: dict       # the sim: section fitted from the run
    warnings: list[str]    # the calibration's own
    reproduction: Reproduction
    baseline: WhatIf       # the calibrated run itself over the seeds (its judgement: against itself)
    changes: list[WhatIf]

    def as_dict(self) -> dict:
        def one(w: WhatIf) -> dict:
            j = w.judgement
            verdict = {} if j is None else {"verdict": j.outcome.value, "verdict_text": j.text(),
                                            "ratio": [j.ratio.low, j.ratio.median, j.ratio.high]}
            return {"change": w.change, "seeds": list(w.seeds), "simulated_time_to_target_s": list(w.times_s),
                    "simulated_median_time_to_target_s": w.median_time_s,
                    "simulated_median_updates_per_s": w.median_updates_per_s, **verdict}
        r = self.reproduction
        return {"run_dir": self.run_dir, "clock": "simulated", "calibrated_sim": self.calibrated,
                "calibration_warnings": self.warnings,
                "reproduction": {"margin": r.margin, "real": dataclasses.asdict(r.real),
                                 "simulated": dataclasses.asdict(r.simulated), "misses": r.misses()},
                "baseline": one(self.baseline), "changes": [one(c) for c in self.changes]}


def _simulate(cfg: Config, out: Path) -> Figures:
    from psgd.orchestrate.api import LaunchError, launch
    try:
        summary = launch(cfg, out=str(out))
    except LaunchError as exc:  # a simulated run that stopped at its cap is no failure here
        if exc.summary is None or not exc.summary.get("wall_time_s"):
            raise
        summary = exc.summary
    return Figures.of(summary)


def _over_seeds(change: str, cfg: Config, seeds: tuple[int, ...], out: Path,
                on_run: Callable[[str], None]) -> tuple[list[Figures], Sample]:
    figures = []
    for seed in seeds:
        on_run(f"{change} seed {seed}")
        figures.append(_simulate(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, seed=seed)),
                                 out / f"{_slug(change)}-s{seed}"))
    return figures, Sample.of([f.time_to_target_s for f in figures], caps=[f.wall_time_s for f in figures],
                              seeds=seeds)


def _slug(change: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in change)[:80]


def what_if(run_dir: Path, changes: list[str], out: Path, seeds: int = SEEDS,
            on_run: Callable[[str], None] = lambda what: None) -> WhatIfReport:
    """Blocks while every simulation runs (each a run directory under `out`); `on_run`
    hears of each as it starts. Raises ConfigError for a run that cannot calibrate or a
    change that is no valid key=value."""
    from psgd.sim.calibrate import calibrate
    run_dir = Path(run_dir)
    if not changes:
        raise ConfigError("--what-if", "name at least one change, e.g. consistency.backup_workers=1")
    if seeds < 2:
        raise ConfigError("--seeds", f"the verdict needs at least 2 seeds per side, got {seeds}")
    found = calibrate(run_dir)
    cfg = found.config(load_config(run_dir / "config.yaml"))
    cfg = load_config(cfg, ["cluster.launcher=sim"])
    changed = {c: load_config(cfg, [c]) for c in changes}  # a bad change fails here, before any simulation
    real = Figures.of(run_summary(run_dir))
    if real.wall_time_s <= 0:
        raise ConfigError("summary.json", f"{run_dir} has no finished summary to reproduce (wall_time_s)")
    on_run("the calibrated run at its own seed")
    reproduction = Reproduction(real, _simulate(cfg, out / "reproduce"), REPRODUCE_MARGIN)
    seed_list = tuple(cfg.run.seed + k for k in range(seeds))
    base_figures, base = _over_seeds("baseline", cfg, seed_list, out, on_run)
    baseline = WhatIf("baseline", seed_list, tuple(f.time_to_target_s for f in base_figures),
                      statistics.median(f.updates_per_s for f in base_figures), None)
    results = []
    for change, changed_cfg in changed.items():
        figures, sample = _over_seeds(change, changed_cfg, seed_list, out, on_run)
        results.append(WhatIf(change, seed_list, tuple(f.time_to_target_s for f in figures),
                              statistics.median(f.updates_per_s for f in figures), judge(sample, base)))
    return WhatIfReport(str(run_dir), found.sim, found.warnings, reproduction, baseline, results)
