"""`--on sim` refuses, at once and naming the key, values it could not finish in bounded time
or whose times would not be finite (issue 39, item 1)."""
from pathlib import Path

import pytest

from psgd.cli import main
from psgd.config.sim import MAX_SIM_WORKERS
from psgd.sim.limits import MAX_EVALUATIONS

CONFIG = Path(__file__).parents[3] / "configs" / "quickstart.yaml"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sets, key, why", [
    (["sim.warmup_steps=1000000000"], "sim.warmup_steps", "must be <= 1000"),
    (["sim.warmup_steps=1e9"], "sim.warmup_steps", "expected an integer"),
    (["eval.every_s=1e-9"], "eval.every_s", f"at most {MAX_EVALUATIONS} evaluations"),
    (["train.max_time_s=1e308", "sim.compute_ms=1e300"], "eval.every_s", f"at most {MAX_EVALUATIONS} evaluations"),
    (["cluster.workers=100000"], "cluster.workers", f"at most {MAX_SIM_WORKERS} on the virtual cluster"),
    (["sim.compute_jitter=1.4e154"], "sim.compute_jitter", "coefficient of variation in [0, 10]"),
    (["sim.worker_spread=1e200"], "sim.worker_spread", "coefficient of variation in [0, 10]"),
    (["sim.compute_ms=1e308", "sim.speedup=1e-300", "eval.enabled=false"], "sim", "must be a finite number"),
])
def test_an_unbounded_or_non_finite_simulation_is_refused_naming_the_key(tmp_path, capsys, sets, key, why):
    args = ["launch", str(CONFIG), "--on", "sim", "--quiet", "--out", str(tmp_path / "run")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key}:" in err and why in err, err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing ran


def test_the_largest_accepted_values_still_run(tmp_path, capsys):
    # Just inside the bounds: evaluations at the limit, large jitter and spread, all times finite.
    args = ["launch", str(CONFIG), "--on", "sim", "--quiet", "--out", str(tmp_path / "run"),
            "--set", "sim.compute_ms=1", "--set", "train.steps_per_worker=20",
            "--set", f"eval.every_s={20e-3 / MAX_EVALUATIONS * 500}",
            "--set", "sim.compute_jitter=10", "--set", "sim.worker_spread=10"]
    assert main(args) == 0, capsys.readouterr().err
    import json
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert all("NaN" not in line and "Infinity" not in line for line in lines)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["worker_steps"] == 4 * 20
