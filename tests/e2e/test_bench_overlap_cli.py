"""`psgd bench overlap` as a user runs it: real shard processes, every variant measured."""
import json

import pytest
from conftest import run_psgd


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_bench_overlap_reports_each_variant_against_its_bounds(tmp_path):
    code, out, err = run_psgd("bench", "overlap", "--size", "256KB", "--runs", "2", "--rounds", "1", "--steps", "4",
                              "--json", cwd=tmp_path, timeout=110)
    assert code == 0, err
    result = json.loads(out)
    assert set(result["points"]) == {"off", "pipeline", "backward"}
    assert all(len(p["steps_per_s"]) == 2 and p["median"] > 0 for p in result["points"].values())
    for k, run in enumerate(result["runs"]):  # every run against the bounds of its own compute and communication
        c, comm = run["compute_s"], run["comm_s"]
        assert run["serial"] == pytest.approx(1 / (c + comm)) and run["ideal"] == pytest.approx(1 / max(c, comm))
        assert run["ideal"] > run["serial"]
        for point in result["points"].values():
            assert point["of_ideal"][k] == pytest.approx(point["steps_per_s"][k] / run["ideal"])
            assert point["of_serial"][k] == pytest.approx(point["steps_per_s"][k] / run["serial"])
