"""`psgd bench overlap` as a user runs it: real shard processes, every variant measured."""
import json

import pytest
from conftest import run_psgd


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_bench_overlap_reports_each_variant_against_its_bounds(tmp_path):
    code, out, err = run_psgd("bench", "overlap", "--size", "256KB", "--runs", "1", "--steps", "8", "--json",
                              cwd=tmp_path, timeout=110)
    assert code == 0, err
    result = json.loads(out)
    assert set(result["points"]) == {"off", "pipeline", "backward"}
    assert all(len(p["steps_per_s"]) == 1 and p["median"] > 0 for p in result["points"].values())
    c, comm = result["compute_s"], result["comm_s"]
    assert result["serial"] == pytest.approx(1 / (c + comm)) and result["ideal"] == pytest.approx(1 / max(c, comm))
    assert result["ideal"] > result["serial"]
