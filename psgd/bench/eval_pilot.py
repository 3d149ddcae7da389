"""Evaluation spacing that resolves a bench's answer.

A time to target is only as fine as the evaluations that find it: a run
evaluated every second that reaches its target in 0.15 s is scored at its
start and its end. Before the measured runs, a pilot runs one seed of each
mode (stopping once the target is held) and the spacing becomes 1/50 of the
fastest pilot's time to target, so a mode up to 2.5x faster than the pilot
still gets EVALS_BEFORE_TARGET evaluations before its target. A pilot that
saw fewer than EVALS_BEFORE_TARGET evaluations before its own target measured
that time coarsely, so it runs again at the finer spacing (at most
PILOT_ROUNDS times). The same rule serves the machine and the virtual cluster
(an evaluation there costs no simulated time). A spacing the user sets
(--set eval.every_s=...) is kept, as is a configured one already fine enough.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from psgd.bench.convergence import ModeSpec, run_matrix, target_spec
from psgd.bench.convergence_report import outcome_of
from psgd.config import load_config

__all__ = ["EVALS_BEFORE_TARGET", "EVALS_PER_PILOT_TARGET", "PILOT_ROUNDS", "Spacing", "user_sets_spacing",
           "choose_spacing", "pilot_eval_spacing"]

EVALS_BEFORE_TARGET = 20     # the fewest evaluations before the fastest mode's target that resolve it
EVALS_PER_PILOT_TARGET = 50  # the spacing: 1/50 of the fastest pilot (margin for faster seeds)
PILOT_ROUNDS = 3


@dataclass(frozen=True)
class Spacing:
    every_s: float
    text: str            # one sentence for the terminal and the report
    pilot_runs: int = 0

    @property
    def override(self) -> str:
        return f"eval.every_s={self.every_s:.6g}"


def user_sets_spacing(overrides: Sequence[str]) -> bool:
    return any(o.partition("=")[0].strip() == "eval.every_s" for o in overrides)


def choose_spacing(every_s: float, fastest_s: Optional[float]) -> tuple[float, bool]:
    """(the spacing to use, whether the pilot must run again at it) after a pilot
    at `every_s` whose fastest held time to target was `fastest_s` (None: none held)."""
    if fastest_s is None or fastest_s <= 0 or fastest_s >= EVALS_PER_PILOT_TARGET * every_s:
        return every_s, False
    return float(f"{fastest_s / EVALS_PER_PILOT_TARGET:.3g}"), fastest_s < EVALS_BEFORE_TARGET * every_s


def pilot_eval_spacing(config_path: str, overrides: list[str], specs: list[ModeSpec], out_dir: Path,
                       on_run: Callable[[str], None] = lambda m: None,
                       child_main: Optional[Callable[[list[str]], int]] = None) -> Spacing:
    """Runs the pilot (blocks) under out_dir/pilot and returns the spacing for the measured runs."""
    base = load_config(config_path, overrides)
    unit = " simulated s" if base.cluster.launcher == "sim" else " s"
    every, runs, fastest = base.eval.every_s, 0, None
    target = target_spec(base)
    for round_ in range(1, PILOT_ROUNDS + 1):
        res = run_matrix(config_path, [*overrides, "train.stop_at_target=true", f"eval.every_s={every:.6g}"], specs,
                         [0], Path(out_dir) / "pilot" / f"round{round_}", on_run=lambda m: on_run(f"pilot: {m}"),
                         child_main=child_main)
        runs += len(res.runs) + len(res.failed)
        held = [t for t in (outcome_of(r, target).time_to_target_s for r in res.runs) if t is not None]
        fastest = min(held) if held else None
        nxt, again = choose_spacing(every, fastest)
        every = nxt
        if not again:
            break
    how = (f"a pilot of {runs} runs (one seed of each mode) held the target in {fastest:.3g}{unit} at the "
           f"fastest, so evaluations come every {every:.3g}{unit}, {fastest / every:.0f} before it"
           if fastest is not None else
           f"no pilot run ({runs} runs, one seed of each mode) held the target, so the configured spacing "
           f"{every:.3g}{unit} stays")
    return Spacing(every, f"Evaluation spacing: {how}.", runs)
