"""`psgd bench faults --on sim`: the storm made by the virtual cluster's failure model at the
planned simulated times, measured by the same arithmetic and statistics as a real storm, and
set beside a real bench's figures."""
import json

import pytest

from psgd.bench.fault_compare import Comparison, compare_storms
from psgd.bench.fault_report import analyse_faults, fault_json, write_fault_report
from psgd.bench.faults import FAULT_FREE, FAULTY, Where, run_fault_bench
from psgd.config.sim_faults import FaultTarget

CONFIG = """
task: {model: linear, dataset: synthetic, batch_size: 16}
cluster: {servers: 2, workers: 3}
consistency: {mode: asp}
train: {steps_per_worker: 1000000, max_time_s: 10, target_accuracy: null}
eval: {every_s: 2.0}
sim: {compute_ms: 500, compute_jitter: 0.2}
supervision: {backoff_s: 0.5}
"""


def test_a_simulated_storm_is_measured_like_a_real_one_and_compared_with_one(tmp_path):
    (tmp_path / "c.yaml").write_text(CONFIG)
    bench = run_fault_bench(str(tmp_path / "c.yaml"), [], FaultTarget.WORKERS, 2.0, 1, tmp_path / "bench",
                            on=Where.SIM)
    assert bench.overrides == ["cluster.launcher=sim", "supervision.max_restarts=3"]
    assert [(r.label, r.seed, r.ok) for r in bench.runs] == [(FAULT_FREE, 0, True), (FAULTY, 0, True)]
    for r in bench.runs:
        assert r.summary["clock"] == "simulated" and all(not a.problems for a in r.accounting)
        if r.label == FAULT_FREE:
            assert r.kills == [] and r.summary["restarts"] == 0
            continue
        assert [(k.t, k.role, k.index) for k in r.kills] == [(2.0, "worker", 0), (4.0, "worker", 1)]
        assert r.summary["restarts"] == 2
        # Back after supervision.backoff_s and sim.faults.restart_s (0.67 s by default).
        assert [round(x.lost_s, 6) for x in r.recoveries] == [1.17, 1.17]
    a = analyse_faults(bench)
    assert a.ratios == [f.goodput / c.goodput for c, f in zip(bench.runs[::2], bench.runs[1::2])]
    assert a.ratios[0] < 1 and a.kills == 2 and a.accounting_problems == []
    simulated = fault_json(bench, a)
    assert simulated["on"] == "sim"
    # A real bench of the same storm whose goodput interval holds the simulated median and whose
    # time lost does not.
    ratio = a.ratio.median
    real = {**{k: simulated[k] for k in ("target", "kill_every_s", "max_time_s", "mode", "workers", "shards")},
            "on": "local", "analysis": {"goodput_ratio": {"median": ratio, "low": ratio - 0.01, "high": ratio + 0.01,
                                                          "n": 5},
                                        "lost_s_per_fault": {"median": 2.0, "low": 1.9, "high": 2.1, "n": 9}}}
    against = compare_storms(simulated, real)
    assert [(c.key, c.inside) for c in against] == [("goodput_ratio", True), ("lost_s_per_fault", False),
                                                    ("throughput_equivalent_lost_s_per_fault", None)]
    report = write_fault_report(bench, a, "psgd bench faults --on sim", "{}", ("real/faults.json", against))
    text = report.read_text()
    assert "(SIMULATED)" in text and "by the virtual cluster's failure model" in text
    assert "| time lost per kill (kill -> back on every shard) | 1.17 s" in text
    assert json.loads((tmp_path / "bench" / "faults.json").read_text())["comparison"]["figures"][
        "goodput_ratio"]["inside"] is True
    with pytest.raises(ValueError, match="the real bench's workers is 4, this one's 3"):
        compare_storms(simulated, {**real, "workers": 4})


def test_inside_means_the_simulated_median_lies_in_the_real_interval():
    real = {"median": 1.0, "low": 0.9, "high": 1.1, "n": 5}
    assert Comparison("k", "n", {"median": 1.1, "low": 0, "high": 9, "n": 5}, real, "", 2).inside is True
    assert Comparison("k", "n", {"median": 1.11, "low": 1.0, "high": 1.2, "n": 5}, real, "", 2).inside is False
    assert Comparison("k", "n", None, real, "", 2).inside is None
