"""`psgd doctor` as a user runs it: real shards, workers and an all-reduce baseline."""
import json

import pytest
import torch
from conftest import run_psgd

import psgd


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_doctor_passes_here_and_reports_each_check_as_json(tmp_path):
    code, out, err = run_psgd("doctor", "--json", cwd=tmp_path, timeout=110)
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and report["failed"] == []
    found = {f["name"]: f for f in report["findings"]}
    assert {"shared_memory", "curvezmq", "network_namespaces", "cpu: bsp = allreduce", "cpu: round trip"} <= set(found)
    exact = found["cpu: bsp = allreduce"]
    assert exact["status"] == "ok" and exact["data"]["max_abs_diff"] <= exact["data"]["atol"]
    assert exact["data"]["backend"] == "gloo" and exact["data"]["workers"] == 2
    assert found["cpu: round trip"]["data"]["median_ms"] > 0
    assert report["environment"]["versions"]["torch"] == torch.__version__
    assert report["environment"]["versions"]["psgd"] == psgd.__version__  # what `psgd --version` prints
    assert report["environment"]["cuda"]["available"] == torch.cuda.is_available()
    if torch.cuda.is_available():
        assert found["cuda: bsp = allreduce"]["status"] == "ok" and found["cuda: round trip"]["data"]["pinned"]
    else:
        assert not any(name.startswith("cuda") for name in found)


@pytest.mark.e2e
@pytest.mark.timeout(60)
@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for a GPU that is missing")
def test_doctor_fails_naming_a_device_that_is_not_there(tmp_path):
    code, out, err = run_psgd("doctor", "--device", "cuda", cwd=tmp_path, timeout=50)
    assert code == 1
    assert "cuda: torch sees no such device here" in out
    assert out.strip().splitlines()[-1] == "psgd doctor: failed: cuda"
