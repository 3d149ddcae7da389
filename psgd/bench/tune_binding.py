"""Which SSP bounds never bound the runs the tuner made.

A bound s makes a worker wait only once its clock is s ahead of the slowest.
With equal workers and no delays no worker gets that far, and every bound
gives the same run: comparing them measures nothing. The largest bound never
bound if no step of its runs saw a clock gap as large as it; a smaller bound
never bound either if its runs are identical, seed by seed, to the largest
bound's (the same evaluations at the same times and the same update count),
since it then behaved as that unbound run.
"""
from __future__ import annotations

from typing import Sequence

from psgd.bench.run_data import RunData

__all__ = ["never_binding", "never_binding_text"]


def _signature(run: RunData) -> tuple:
    evals = tuple((e.get("t"), e.get("accuracy"), e.get("loss")) for e in run.training_evals)
    return evals, run.summary.get("total_updates"), run.summary.get("final_test_loss")


def never_binding(runs: Sequence[RunData]) -> list[int]:
    """The bounds (ascending) that never made a worker wait in `runs`, the
    tuner's SSP runs; empty when the largest bound bound or no run carries
    its clock gaps."""
    by: dict[int, dict[int, RunData]] = {}
    for r in runs:
        if r.summary.get("mode") == "ssp" and r.summary.get("staleness") is not None:
            by.setdefault(int(r.summary["staleness"]), {})[int(r.summary.get("seed") or 0)] = r
    if not by:
        return []
    top = max(by)
    gaps = [r.summary.get("max_clock_gap") for r in by[top].values()]
    if not gaps or any(g is None or int(g) >= top for g in gaps):
        return []
    free = [top]
    for b in sorted(by, reverse=True)[1:]:
        same = [s for s in by[b] if s in by[top]]
        if same and all(_signature(by[b][s]) == _signature(by[top][s]) for s in same):
            free.append(b)
        else:
            break  # a smaller bound can only bind more
    return sorted(free)


def never_binding_text(bounds: Sequence[int]) -> str:
    """The sentence the terminal and tune.md print (empty when every bound bound)."""
    if not bounds:
        return ""
    names = ", ".join(f"s={b}" for b in bounds)
    return (f"Bounds that never bind here: {names} (no worker waited: no clock gap reached the largest bound, and "
            f"{'these bounds gave identical runs seed by seed' if len(bounds) > 1 else 'it is the largest bound'}). "
            "They cannot be told apart on this setting; a straggler (workers.slowdown) or step-time jitter "
            "(sim.compute_jitter) makes the bound matter.")
