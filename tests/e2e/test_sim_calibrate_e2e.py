"""`psgd sim calibrate` on a real run, then the calibrated config on the virtual cluster at 4x the workers."""
import json
import statistics

import pytest
import yaml
from conftest import ROOT, launch, read_events, run_psgd

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(120)
def test_a_real_run_calibrates_the_simulator_that_then_runs_at_scale(tmp_path):
    config = tmp_path / "quickstart.yaml"
    config.write_text((ROOT / "configs" / "quickstart.yaml").read_text())
    code, output, _ = launch(config, tmp_path / "real", "train.steps_per_worker=60", "train.stop_at_target=false",
                             "workers.device=cpu", timeout=100)
    assert code == 0, output
    code, out, err = run_psgd("sim", "calibrate", str(tmp_path / "real"), "--json", "--out", str(tmp_path / "cal.yaml"),
                              cwd=tmp_path, timeout=60)
    assert code == 0, err
    found = json.loads(out)
    sim = found["sim"]
    steps = [e for e in read_events(tmp_path / "real") if e.get("event") == "step"]
    median_ms = statistics.median(e["compute_s"] for e in steps) * 1e3
    assert found["evidence"]["compute_ms_median"] == pytest.approx(median_ms, abs=1e-6)
    # Real steps vary; compute_ms is then the mean of the lognormal with that median and
    # spread: median x exp(sigma^2 / 2) = median x sqrt(1 + cv^2).
    assert sim["compute_jitter"] > 0
    assert sim["compute_ms"] == pytest.approx(median_ms * (1 + sim["compute_jitter"] ** 2) ** 0.5, rel=1e-3)
    assert yaml.safe_load((tmp_path / "cal.yaml").read_text())["sim"]["latency_us"] == sim["latency_us"]
    code, output, summary = launch(tmp_path / "cal.yaml", tmp_path / "sim", "cluster.launcher=sim",
                                   "cluster.workers=16", timeout=100)
    assert code == 0, output
    assert summary["clock"] == "simulated" and summary["worker_steps"] == 16 * 60
