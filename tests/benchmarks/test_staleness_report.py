"""benchmarks/staleness/make_report.py reads the tuner's recommendation from
its data (tune_seeds.csv, by the tuner's own rule), not from tune.md (which the
study's tuner wrote under the rule of its day)."""
import re

import pytest
from conftest import ROOT, load_script

report = load_script("benchmarks/staleness/make_report.py")


@pytest.mark.parametrize("case", ["fixed", "random", "transient"])
def test_the_report_states_the_bound_the_tuners_rule_picks_from_its_runs(case):
    d = ROOT / "benchmarks" / "staleness" / case
    section = (ROOT / "benchmarks" / "staleness" / "report.md").read_text().split(f"## {case}:")[1].split("## ")[0]
    stated = re.search(r"\| ssp:(\d+) \(tuned\) \|", section)
    assert report.tuned_bound(report.seeds(d / "tune_seeds.csv")) == int(stated.group(1))


def test_no_tuner_runs_no_bound(tmp_path):
    assert report.tuned_bound(report.seeds(tmp_path / "missing.csv")) is None
