"""Run directories an adversary prepared (issue 39, item 6): nothing is written through
a symbolic link the run did not create, and a fresh launch into a finished run is
refused instead of silently continuing its checkpoints; `--resume` still continues it."""
import json
import shutil
from pathlib import Path

import pytest
from conftest import launch, one_clear_line, run_psgd, write_config

pytestmark = pytest.mark.e2e

SHORT = ["train.steps_per_worker=10", "cluster.workers=2"]
VICTIM = "a file outside the run\n"


def _plant(run_dir, name, tmp_path):
    victim = tmp_path / f"victim-{name}"
    victim.write_text(VICTIM)
    run_dir.mkdir(mode=0o755, exist_ok=True)
    (run_dir / name).unlink(missing_ok=True)
    (run_dir / name).symlink_to(victim)
    return victim


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher, name", [("local", "metrics.csv"), ("sim", "metrics.csv"), ("sim", "model.pt")])
def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path, launcher, name):
    config = write_config(tmp_path / "config.yaml")
    run_dir = tmp_path / "run"
    victim = _plant(run_dir, name, tmp_path)
    code, output, _ = launch(config, run_dir, *SHORT, f"cluster.launcher={launcher}")
    assert code == 1
    line = one_clear_line(output)
    assert f"cannot write {run_dir / name}: it is a symbolic link the run did not create" in line, line
    assert victim.read_text() == VICTIM
    assert (run_dir / name).is_symlink()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One finished short run, shared: each test works on its own copy (a run directory holds
    no absolute path: a copy resumes as the original does)."""
    base = tmp_path_factory.mktemp("finished")
    code, output, summary = launch(write_config(base / "config.yaml"), base / "run", *SHORT)
    assert code == 0, output
    return base / "run", summary


def _copy(finished_run, tmp_path):
    return Path(shutil.copytree(finished_run[0], tmp_path / "run", symlinks=True)), finished_run[1]


@pytest.mark.timeout(180)
def test_a_fresh_launch_into_a_finished_run_is_refused_and_resume_still_continues_it(tmp_path, finished_run):
    config = write_config(tmp_path / "config.yaml")
    run_dir, summary = _copy(finished_run, tmp_path)
    checkpoints = sorted(p.relative_to(run_dir) for p in (run_dir / "checkpoints").rglob("*"))
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    code, output, again = launch(config, run_dir, *SHORT)
    assert code == 1
    line = one_clear_line(output)
    assert f"{run_dir} already holds a run (checkpoints, metrics.jsonl, summary.json" in line, line
    assert f"psgd launch --resume {run_dir}" in line
    assert again == summary and (run_dir / "metrics.jsonl").read_bytes() == metrics
    assert sorted(p.relative_to(run_dir) for p in (run_dir / "checkpoints").rglob("*")) == checkpoints
    # --resume names the run: it continues (nothing left to do) and reports the same updates.
    code, out, err = run_psgd("launch", "--resume", str(run_dir), "--quiet", cwd=tmp_path, timeout=100)
    assert code == 0, err
    assert json.loads((run_dir / "summary.json").read_text())["total_updates"] == summary["total_updates"]


@pytest.mark.timeout(180)
def test_a_link_planted_in_a_run_being_resumed_is_refused(tmp_path, finished_run):
    run_dir, _ = _copy(finished_run, tmp_path)
    victim = tmp_path / "victim-metrics.jsonl"
    victim.write_bytes((run_dir / "metrics.jsonl").read_bytes())  # the run reads it back: same events
    before = victim.read_bytes()
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").symlink_to(victim)
    code, out, err = run_psgd("launch", "--resume", str(run_dir), "--quiet", cwd=tmp_path, timeout=100)
    assert code == 1
    line = one_clear_line(out + err)
    assert f"cannot write {run_dir / 'metrics.jsonl'}: it is a symbolic link the run did not create" in line, line
    assert victim.read_bytes() == before
