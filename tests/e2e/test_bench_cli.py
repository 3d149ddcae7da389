"""Benchmark commands on tiny sizes: output schema, ratios derived from the
measured numbers, reports written. No absolute times are asserted."""
import json
import subprocess

import pytest
from conftest import kill_tree, psgd_cmd, spawn

from psgd.bench.comm import MORE_PEERS
from psgd.bench.scale import run_scale_bench
from psgd.config.operations import SHARED_MEMORY_MIN_BYTES
from psgd.wire.shm.segment import available as shm_available

ROW_KEYS = {"size_bytes", "shards", "psgd_ms", "raw_zmq_ms", "gloo_ms", "torch_rpc_ms", "raw_zmq_sgd_ms",
            "psgd_over_raw_zmq", "torch_rpc_over_psgd", "gloo_over_psgd", "raw_zmq_sgd_over_raw_zmq",
            "psgd_over_raw_zmq_sgd", "repeats",
            # the same-host data path (issue 16): psgd over TCP, the shared-memory floors, Ray, and the runs combined
            "psgd_over_torch_rpc", "psgd_tcp_ms", "psgd_over_psgd_tcp", "psgd_tcp_over_raw_zmq_sgd", "shm_floor_ms",
            "psgd_over_shm_floor", "shm_floor_inproc_ms", "psgd_over_shm_floor_inproc", "ray_ms", "psgd_over_ray",
            "shared_memory", "runs"}


def _run(args, timeout):
    proc = spawn(psgd_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"{args} did not finish in {timeout}s") from None
    assert proc.returncode == 0, err
    return out


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_bench_comm_json_schema_and_ratios(tmp_path):
    out = _run(["bench", "comm", "--sizes", "64KB", "--shards", "1", "--repeats", "3", "--json", "--no-ray",
                "--no-cross-host", "--out", str(tmp_path / "comm")], timeout=140)
    rows = json.loads(out)["rows"]
    assert [(r["size_bytes"], r["shards"]) for r in rows] == [(65536, 1)]
    for r in rows:
        assert ROW_KEYS <= set(r)
        for peer in MORE_PEERS:  # every extra peer has a column and psgd's ratio to it (null: not installed)
            assert f"{peer}_ms" in r and f"psgd_over_{peer}" in r
            if r[f"{peer}_ms"] is not None:
                assert r[f"psgd_over_{peer}"] == pytest.approx(r["psgd_ms"] / r[f"{peer}_ms"], rel=1e-3)
        assert all(r[k] > 0 for k in ("psgd_ms", "raw_zmq_ms", "gloo_ms", "torch_rpc_ms", "raw_zmq_sgd_ms"))
        assert r["psgd_over_raw_zmq_sgd"] == pytest.approx(r["psgd_ms"] / r["raw_zmq_sgd_ms"], rel=1e-3)
        assert r["psgd_over_raw_zmq"] == pytest.approx(r["psgd_ms"] / r["raw_zmq_ms"], rel=1e-3)
        assert r["torch_rpc_over_psgd"] == pytest.approx(r["torch_rpc_ms"] / r["psgd_ms"], rel=1e-3)
        assert r["gloo_over_psgd"] == pytest.approx(r["gloo_ms"] / r["psgd_ms"], rel=1e-3)
        assert r["psgd_over_shm_floor"] == pytest.approx(r["psgd_ms"] / r["shm_floor_ms"], rel=1e-3)
        # 64 KB is above wire.shared_memory_min_bytes' default: the default path is shared memory too.
        assert 65536 >= SHARED_MEMORY_MIN_BYTES
        assert r["ray_ms"] is None and r["shared_memory"] is shm_available() and r["psgd_shm_ms"] > 0
    report = (tmp_path / "comm" / "report.md").read_text()
    assert "psgd bench comm --sizes 64KB" in report and (tmp_path / "comm" / "round_trip.png").stat().st_size
    assert json.loads((tmp_path / "comm" / "results.json").read_text())["rows"] == rows


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_bench_scale_tiny_run():
    result = run_scale_bench([1], [1, 4], grad_bytes=4096, compute_ms=5.0, warmup_s=0.2, window_s=0.5,
                             processes=1)
    assert [(r["shards"], r["workers"]) for r in result["rows"]] == [(1, 1), (1, 4)]
    for r in result["rows"]:
        assert r["updates_per_s"] > 0 and r["pull_latency_ms_median"] > 0
        assert r["ideal_updates_per_s"] == r["workers"] / 0.005
    assert set(result["saturation"]) == {"1"}
