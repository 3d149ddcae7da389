"""benchmarks/convergence-sim: the scale study's report is computed from the
cases' seeds.csv files with the one verdict rule, its words from the verdicts;
and the real study's heavy-tailed claim is judged apart."""
import csv
import json
import shutil
from pathlib import Path

from conftest import load_script

from psgd.bench.outcomes import RunOutcome, mode_stats

literature = load_script("benchmarks/convergence/literature.py")
report = load_script("benchmarks/convergence-sim/report.py")
study = load_script("benchmarks/convergence-sim/study.py")

FIELDS = ["label", "lr", "seed", "chosen_lr", "time_to_target_s", "final_metric", "train_time_s", "examples",
          "examples_per_s", "wire_bytes_per_example"]


def stats_of(times_by_label):
    return mode_stats([RunOutcome(label, seed, 0.1, t, 0.9, 10.0, 1000)
                       for label, times in times_by_label.items() for seed, t in enumerate(times)])


def test_heavy_tailed_delays_are_judged_apart_and_only_when_asked():
    cases = {"none": stats_of({"bsp": [10, 11, 12], "ssp:1": [10, 11, 12]}),
             "pareto": stats_of({"bsp": [30, 31, 32], "bsp+b4": [20, 21, 22], "ssp:1": [40, 41, 42]})}
    claims = {c.claim.split(": ", 1)[1]: c.verdict
              for c in literature.study_verdicts(cases, "w", True, heavy_tail="pareto")}
    assert claims["SSP beats BSP under heavy-tailed per-step delays (time to target)"] == "not confirmed"
    assert claims["backup workers shorten BSP's time to target under heavy-tailed per-step delays"] == "confirmed"
    assert claims["DC-ASGD beats plain ASP (time to target)"] == "not tested"
    plain = [c.claim for c in literature.study_verdicts(cases, "w", True)]
    assert not any("heavy-tailed" in c for c in plain)


STUDY = Path(__file__).resolve().parents[2] / "benchmarks" / "convergence-sim"


def write_case(d, w, case, times_by_mode, cap):
    path = d / f"w{w}-{case}"
    path.mkdir(parents=True)
    with open(path / "seeds.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, FIELDS)
        wr.writeheader()
        for mode, times in times_by_mode.items():
            for seed, t in enumerate(times):
                wr.writerow({"label": mode, "lr": 0.1, "seed": seed, "chosen_lr": "True",
                             "time_to_target_s": "" if t is None else t, "final_metric": 0.1,
                             "train_time_s": cap if t is None else t, "examples": 100, "examples_per_s": 10,
                             "wire_bytes_per_example": 100})


def test_the_report_and_the_readme_follow_the_verdicts(tmp_path):
    shutil.copy(STUDY / "workload.yaml", tmp_path / "workload.yaml")
    (tmp_path / "README.md").write_text("intro\n" + "\n".join(report.README_MARKS) + "\nafter\n")
    rates = {m: {"lr": 0.1, "grid": [0.03, 0.1, 0.3], "median_s": 2.0, "edge": "", "extended_to": None}
             for m in ("bsp", "asp", "ssp:8")}
    rates["asp"]["edge"] = "low"
    design = {"modes": ["bsp", "asp", "ssp:8"], "cases": ["none", "straggler"], "grid_step": 3, "grid_seeds": 2,
              "sync_base_lr": 0.02, "async_base_lr": 0.01, "sweep_w": 64, "sweep_seeds": 3,
              "sweep": {"jitter-0": {"key": "sim.compute_jitter", "value": 0.0}}, "sweep_cases": ["none"],
              "workers": {"4": {"pilot_cap_s": 8, "cap_s": 6, "rates": rates},
                          "64": {"pilot_cap_s": 4, "cap_s": 6, "rates": rates}}}
    (tmp_path / "design.json").write_text(json.dumps(design))
    same = [2.0, 2.1, 1.9, 2.05, 1.95]
    write_case(tmp_path, 4, "none", {"bsp": same, "asp": [x * 0.5 for x in same], "ssp:8": [x * 0.5 for x in same]}, 6)
    write_case(tmp_path, 4, "straggler", {"bsp": [None] * 5, "asp": same, "ssp:8": [1.0, 1.0]}, 6)
    write_case(tmp_path, 64, "none", {"bsp": same, "asp": same, "ssp:8": [x * 1.02 for x in same]}, 6)
    (tmp_path / "study.log").write_text("study started ...; budget 60 s\n"
                                        "w64-straggler: not started (the study's budget of 60 s was spent)\n")
    text = report.main(tmp_path).read_text()
    assert text.index("## Conclusion") < text.index("## Results")
    assert "- no straggler: asp against bsp: faster at W = 4; tied at W = 64." in text
    assert "- the last rank 4× slower: asp against bsp: faster (decided by the cap) at W = 4." in text
    assert "ssp:8 against bsp: inconclusive at W = 4." in text       # two seeds: too few
    assert "- W = 4, no straggler: asp, ssp:8 gave identical runs, seed by seed (a bound" in text
    assert "- W = 4: cap 6 simulated s (grid runs 8 s); 1 of 4 verdicts decided by the cap." in text
    assert "| 4 | the last rank 4× slower | bsp | 0.1 | 0/5 | 6.00 (censored) |" in text
    assert "| 64 (extrapolation) | no straggler | asp | 0.1 (low end) |" in text
    assert "| 4 | no straggler | asp | 0.1 (low end) |" in text
    assert "- W = 16: no run" in text and "- W = 64, the last rank 4× slower: bsp" in text
    assert "- sensitivity jitter-0, no straggler: no run" in text
    assert "- study.log: w64-straggler: not started (the study's budget of 60 s was spent)" in text
    assert "time model: the per-link one (no `sim.hosts`)" in text
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("intro\n<!-- results") and readme.endswith("<!-- end of results -->\nafter\n")
    assert "faster at W = 4; tied at W = 64." in readme and "| 64 (extrapolation) |" in readme


def test_seeds_censored_before_the_cap_are_counted_apart(tmp_path):
    """A run that stopped without holding the target by the bench's rule, before the cap, is
    censored at its own end; the caps section counts such seeds."""
    shutil.copy(STUDY / "workload.yaml", tmp_path / "workload.yaml")
    rates = {m: {"lr": 0.1, "grid": [0.03, 0.1, 0.3], "median_s": 2.0, "edge": "", "extended_to": None}
             for m in ("bsp", "asp")}
    (tmp_path / "design.json").write_text(json.dumps({
        "modes": ["bsp", "asp"], "cases": ["none"], "grid_step": 3, "grid_seeds": 2, "sync_base_lr": 0.02,
        "async_base_lr": 0.01, "sweep_w": 0, "sweep_seeds": 3, "workers": {"4": {"pilot_cap_s": 8, "cap_s": 6,
                                                                               "rates": rates}}}))
    write_case(tmp_path, 4, "none", {"bsp": [2.0, 2.1, 1.9, 2.05, 1.95], "asp": [None, None, None, 2.0, 2.1]}, 2.5)
    text = report.main(tmp_path).read_text()
    assert "| 4 | no straggler | asp | 0.1 | 2/5 | 2.50 (censored) |" in text
    assert "0 of 1 verdicts decided by the cap; 3 seeds ended before the cap without holding" in text


def test_a_run_of_some_w_keeps_the_others_and_the_grids_centre_as_stated(tmp_path, monkeypatch):
    (tmp_path / "design.json").write_text(json.dumps({"workers": {"4": {"cap_s": 1.3}, "256": {"cap_s": 2.0}}}))
    monkeypatch.setattr(study, "HERE", tmp_path)
    monkeypatch.setattr(study, "WORKERS", [256])
    assert study._kept_designs() == {4: {"cap_s": 1.3}}
    monkeypatch.setattr(study, "WORKERS", [4, 16, 64, 256])
    assert study._kept_designs() == {}
    # synchronous grids on SYNC_BASE_LR x sqrt(W), asynchronous on ASYNC_BASE_LR x sqrt(4 / W), x3 apart
    assert study.grid(study.centre_lr("sync", 256)) == [0.107, 0.32, 0.96]
    assert study.grid(study.centre_lr("async", 4)) == [0.00333, 0.01, 0.03]
    assert study.grid(study.centre_lr("async", 256)) == [0.000417, 0.00125, 0.00375]
