"""Benchmark commands on tiny sizes: output schema, ratios derived from the
measured numbers, reports written. No absolute times are asserted."""
import pytest

from psgd.bench.apply import run_apply_bench
from psgd.bench.comm import comm_row
from psgd.bench.procs import parse_size
from psgd.bench.scale import find_saturation


def test_comm_row_takes_medians_and_their_ratios():
    row = comm_row(1024, 1, psgd=[0.003, 0.001, 0.002], raw=[0.001, 0.004, 0.0005],
                   gloo=[0.002], rpc=[0.010, 0.006, 0.008], raw_sgd=[0.0015, 0.0016, 0.0014])
    assert (row["psgd_ms"], row["raw_zmq_ms"], row["gloo_ms"], row["torch_rpc_ms"]) == (2.0, 1.0, 2.0, 8.0)
    assert (row["psgd_over_raw_zmq"], row["torch_rpc_over_psgd"], row["gloo_over_psgd"]) == (2.0, 4.0, 1.0)
    assert (row["raw_zmq_sgd_ms"], row["raw_zmq_sgd_over_raw_zmq"], row["psgd_over_raw_zmq_sgd"]) == (1.5, 1.5, 1.3333)


def test_bench_apply_reports_bytes_over_time():
    rows = run_apply_bench([64 << 10], ["sgd", "adam"], repeats=3)["rows"]
    assert [r["optimizer"] for r in rows] == ["sgd", "adam"]
    for r in rows:
        assert r["gb_per_s"] == pytest.approx(r["size_bytes"] / (r["median_ms"] / 1e3) / 1e9, rel=1e-2)


def test_find_saturation_is_where_scaling_stays_below_80_percent_of_linear():
    rows = [{"shards": 1, "workers": w, "updates_per_s": u} for w, u in
            ((1, 50), (4, 120), (16, 700), (64, 1000), (256, 1100))]
    sat = find_saturation(rows)[1]
    assert sat["saturates_at_workers"] == 64            # 1000 < 0.8 * 64 * 50; the dip at 4 recovered
    assert (sat["peak_updates_per_s"], sat["peak_workers"]) == (1100, 256)
    linear = [{"shards": 2, "workers": w, "updates_per_s": 50 * w} for w in (1, 8, 64)]
    assert find_saturation(linear)[2]["saturates_at_workers"] is None


@pytest.mark.parametrize("text,expected", [("1MB", 1 << 20), ("64KB", 65536), ("0.5MB", 1 << 19), ("4096", 4096)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["x", "3", "-4", "1.5B"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="bad size"):
        parse_size(text)
