"""benchmarks/staleness/make_report.py reads the tuner's recommendation from
its data (tune_seeds.csv, by the tuner's own rule), not from tune.md."""
import re

import pytest
from conftest import ROOT, load_script

report = load_script("benchmarks/staleness/make_report.py")


@pytest.mark.parametrize("case", ["fixed", "random", "transient"])
def test_the_tuned_bound_is_the_one_the_tuner_recommended(case):
    d = ROOT / "benchmarks" / "staleness" / case
    recorded = re.search(r"recommended bound: (\d+)", (d / "tune.md").read_text())
    assert report.tuned_bound(report.seeds(d / "tune_seeds.csv")) == int(recorded.group(1))


def test_no_tuner_runs_no_bound(tmp_path):
    assert report.tuned_bound(report.seeds(tmp_path / "missing.csv")) is None
