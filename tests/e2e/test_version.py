"""`psgd --version` names the psgd that a run's summary.json and `psgd doctor` record."""
import pytest
from conftest import ROOT, launch, run_psgd


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_version_flag_prints_what_summary_json_records(tmp_path):
    code, out, err = run_psgd("--version", cwd=tmp_path, timeout=30)
    assert code == 0, err
    name, version = out.strip().split(" ")
    assert name == "psgd" and version
    code, output, summary = launch(ROOT / "configs" / "quickstart.yaml", tmp_path / "run", "cluster.launcher=sim",
                                   "cluster.workers=2", "train.steps_per_worker=5", timeout=100)
    assert code == 0, output
    assert summary["psgd_version"] == version
