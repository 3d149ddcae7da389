"""`psgd tune staleness`: the recommendation rule on hand-made results (exact),
and one real smoke run of the CLI on a tiny config."""
from pathlib import Path
import pytest
from conftest import run_psgd
from psgd.bench.run_data import RunData


def _run(bound, ttt, acc):
    return RunData(Path("/r"), f"ssp:{bound}", {"time_to_target_s": ttt, "final_test_accuracy": acc})


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_tune_staleness_cli_prints_table_and_recommended_bound(small_config, tmp_path):
    cfg = small_config(consistency={"mode": "ssp", "staleness": 1},
                       train={"steps_per_worker": 30, "max_time_s": 30, "target_accuracy": 0.99},
                       eval={"every_s": 0.25})
    out = tmp_path / "tune"
    code, stdout, stderr = run_psgd("tune", "staleness", str(cfg), "--bounds", "0,2", "--target-accuracy", "0.3",
                          "--out", str(out), "--set", "optimizer.lr=0.2", cwd=tmp_path)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("| bound s | seeds | reached 0.3 |")
    assert [ln.split("|")[1].strip() for ln in lines[2:4]] == ["0", "2"]
    assert lines[4].startswith("recommended bound: ") and int(lines[4].split()[2]) in (0, 2)
    # --target-accuracy overrides the config's target in every run.
    assert all("target_accuracy: 0.3" in (d / "config.yaml").read_text() for d in (out / "runs").iterdir())
    md = (out / "tune.md").read_text()
    assert lines[4] in md and (out / "tune.csv").read_text().startswith("bound,seeds,reached")
    assert (out / "report.md").is_file() and (out / "accuracy_vs_time.png").stat().st_size > 5000
