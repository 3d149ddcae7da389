"""Comm rows with the same-host peers, several runs combined, the report (ratios,
no pass/fail), and the scale bench's path comparison."""
from __future__ import annotations

import pytest

from psgd.bench.comm import comm_row, cross_host_row
from psgd.bench.comm_report import combine_runs, write_comm_report
from psgd.bench.scale import find_saturation, path_speedups

MS = 1e-3


def _row(size, psgd, floor=1.0, shm=1.0, rpc=4.0, ray=5.0, shm_zmq=1.25):
    return comm_row(size, 1, psgd=[psgd * MS], raw=[0.5 * MS], gloo=[2 * MS], rpc=[rpc * MS], raw_sgd=[floor * MS],
                    more={"psgd_tcp": [2 * psgd * MS], "shm_floor": [shm * MS], "shm_zmq_floor": [shm_zmq * MS],
                          "shm_floor_inproc": [0.5 * MS], "ray": [ray * MS] if ray else []})


def test_more_peers_give_columns_and_psgd_ratios():
    row = _row(1 << 20, psgd=1.0, shm=0.8, rpc=4.0, ray=5.0)
    assert row["shm_floor_ms"] == 0.8 and row["psgd_over_shm_floor"] == 1.25
    assert row["psgd_over_torch_rpc"] == 0.25 and row["psgd_over_ray"] == 0.2
    assert row["psgd_tcp_over_raw_zmq_sgd"] == 2.0 and row["psgd_over_psgd_tcp"] == 0.5
    both = comm_row(1 << 20, 1, [1 * MS], [1 * MS], [1 * MS], [1 * MS], [1 * MS],
                    more={"psgd_tcp": [2 * MS], "psgd_shm": [1.5 * MS]})
    assert both["psgd_shm_over_psgd_tcp"] == 0.75 and both["psgd_over_psgd_shm"] == pytest.approx(0.6667)
    unmeasured = _row(1 << 20, psgd=1.0, ray=None)
    assert unmeasured["ray_ms"] is None and unmeasured["psgd_over_ray"] is None
    with pytest.raises(ValueError, match="unknown comm peer"):
        comm_row(4, 1, [1], [1], [1], [1], [1], more={"nope": [1]})


def test_runs_combine_to_the_median_of_each_figure():
    runs = [{"rows": [_row(1 << 20, psgd=p)], "cross_host": [cross_host_row(1 << 20, {"psgd": [p * MS],
                                                                                      "raw_sgd": [1 * MS],
                                                                                      "shared_memory": False})],
             "repeats": 1, "warmup": 0, "load_avg_end": 1.0, "load_avg_max": m}
            for p, m in ((1.0, 2.0), (3.0, 5.0), (2.0, 1.0))]
    combined = combine_runs(runs)
    (row,) = combined["rows"]
    assert row["psgd_ms"] == 2.0 and row["psgd_over_shm_floor"] == 2.0 and row["runs"] == 3
    assert combined["cross_host"][0]["psgd_over_raw_zmq_sgd"] == 2.0
    assert combined["load_avg_max"] == 5.0 and len(combined["per_run"]) == 3


def test_report_is_written_from_the_result(tmp_path):
    runs = [{"rows": [_row(1 << 20, psgd=1.0)], "cross_host": [], "cross_host_skipped": "needs root",
             "repeats": 1, "warmup": 0, "load_avg_end": 1.0, "load_avg_max": 2.0, "ray": "measured"}]
    write_comm_report(combine_runs(runs), tmp_path, "psgd bench comm")
    text = (tmp_path / "report.md").read_text()
    assert "Not measured: needs root." in text and "| 1 MB | 1 |" in text
    assert "Acceptance" not in text and "FAIL" not in text  # the project's targets: benchmarks/check_targets.py
    assert "shared-memory round trip goes" not in text  # psgd did not use shared memory in that row
    runs[0]["rows"][0].update(shared_memory=True, psgd_ms=1.5, shm_floor_ms=1.0, shm_zmq_floor_ms=1.25)
    write_comm_report(combine_runs(runs), tmp_path, "psgd bench comm")
    # in-process floor, what a second process woken by a pipe adds, what the protocol adds, psgd,
    # and what waking over ZeroMQ instead of the pipe would add
    assert "| 1 MB | 0.500 | +0.500 | +0.500 | 1.500 | +0.250 |" in (tmp_path / "report.md").read_text()
    runs[0]["rows"][0].update(shared_memory=False, psgd_ms=2.0, psgd_shm_ms=1.75)
    write_comm_report(combine_runs(runs), tmp_path, "psgd bench comm")
    # the default stayed on TCP: the split is of the path that used shared memory at any size
    assert "| 1 MB | 0.500 | +0.500 | +0.750 | 1.750 | +0.250 |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "round_trip.png").exists() and (tmp_path / "results.json").exists()


def test_scale_paths_are_compared_point_by_point_and_saturate_separately():
    rows = [{"shards": 1, "workers": w, "shared_memory": p, "updates_per_s": u}
            for w, p, u in ((4, "off", 100.0), (4, "auto", 110.0), (64, "off", 1000.0), (64, "auto", 1500.0),
                            (64, "auto", 1700.0))]
    (small, big) = path_speedups(rows)
    assert small["auto_over_off"] == 1.1 and big["auto_updates_per_s"] == 1600.0 and big["auto_over_off"] == 1.6
    sat = find_saturation(rows)
    assert set(sat) == {"1/auto", "1/off"} and sat["1/auto"]["peak_updates_per_s"] == 1700.0
