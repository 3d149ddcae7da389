"""`psgd tune staleness` without --target-accuracy aims at the config's target."""
import pytest
from conftest import run_psgd

from psgd.bench.convergence_report import describe_target

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_the_target_comes_from_the_config_when_the_flag_is_absent(small_config, tmp_path):
    cfg = small_config(consistency={"mode": "ssp", "staleness": 1},
                       train={"steps_per_worker": 30, "max_time_s": 30, "target_accuracy": 0.3},
                       eval={"every_s": 0.25})
    code, stdout, stderr = run_psgd("tune", "staleness", str(cfg), "--bounds", "1", "--seeds", "1",  # one run
                                    "--out", str(tmp_path / "tune"), "--set", "optimizer.lr=0.2",
                                    "--set", "eval.every_s=0.25", cwd=tmp_path)  # as configured: no pilot
    assert code == 0, stderr
    target = describe_target("accuracy", 0.3)
    assert f"target: {target} (train.target_accuracy)" in stderr
    assert stdout.splitlines()[0].startswith(f"| bound s | lr | seeds run | held {target} |")
    assert (tmp_path / "tune" / "tune.md").read_text().startswith(f"# Staleness tuning, target {target}")


@pytest.mark.timeout(60)
def test_without_a_target_anywhere_it_says_where_to_give_one(small_config, tmp_path):
    cfg = small_config(train={"target_accuracy": None})
    code, _, stderr = run_psgd("tune", "staleness", str(cfg), "--bounds", "1", "--out", str(tmp_path / "tune"),
                               cwd=tmp_path, timeout=50)
    assert code == 2
    assert "give --target-accuracy, or set train.target (or train.target_accuracy) in the config" in stderr
    assert not (tmp_path / "tune").exists()
