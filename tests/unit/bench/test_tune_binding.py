"""Which SSP bounds never bound a tuner's runs (psgd.bench.tune_binding)."""
from pathlib import Path

from psgd.bench.run_data import RunData
from psgd.bench.tune_binding import never_binding, never_binding_text


def _run(bound: int, seed: int, gap: int, accuracies: list[float], updates: int = 100) -> RunData:
    summary = {"mode": "ssp", "staleness": bound, "seed": seed, "max_clock_gap": gap, "total_updates": updates,
               "final_test_loss": 0.3}
    evals = [{"event": "eval", "t": 0.1 * i, "accuracy": a, "loss": 1 - a} for i, a in enumerate(accuracies)]
    steps = [{"event": "step", "t": 0.1 * len(accuracies)}]
    return RunData(Path(f"ssp{bound}-{seed}"), f"ssp:{bound}", summary, evals, steps)


def test_bounds_whose_runs_repeat_the_unbound_largest_never_bind():
    same = [0.5, 0.8, 0.9]
    runs = [_run(b, s, 1, same) for b in (1, 2, 4, 8) for s in (0, 1)]
    runs += [_run(0, s, 0, [0.5, 0.7, 0.9]) for s in (0, 1)]  # s=0 waits: a different run
    assert never_binding(runs) == [1, 2, 4, 8]
    text = never_binding_text([1, 2, 4, 8])
    assert text.startswith("Bounds that never bind here: s=1, s=2, s=4, s=8 (no worker waited")


def test_a_largest_bound_that_the_gaps_reached_may_have_bound():
    runs = [_run(b, 0, 2, [0.5, 0.9]) for b in (1, 2)]
    assert never_binding(runs) == []


def test_one_differing_seed_makes_a_bound_count_as_binding():
    runs = [_run(8, s, 3, [0.5, 0.9]) for s in (0, 1)] + [_run(4, 0, 3, [0.5, 0.9]), _run(4, 1, 3, [0.5, 0.85])]
    runs += [_run(2, s, 2, [0.5, 0.9]) for s in (0, 1)]  # like s=8, but s=4 already differs: it bound
    assert never_binding(runs) == [8]
    assert never_binding_text([]) == ""
