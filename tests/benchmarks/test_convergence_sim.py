"""benchmarks/convergence-sim: the scale study's report is computed from the
cases' seeds.csv files with the real study's judges, and the claims it adds
(heavy-tailed delays, the local-update claims of issue #26) are judged from
the intervals."""
import csv

from conftest import load_script

from psgd.bench.outcomes import RunOutcome, mode_stats

literature = load_script("benchmarks/convergence/literature.py")
claims_local = load_script("benchmarks/convergence-sim/claims_local.py")
report = load_script("benchmarks/convergence-sim/report.py")

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


def rows(label, times, rate, wire):
    return [{"label": label, "lr": 0.1, "seed": s, "chosen_lr": "True", "time_to_target_s": t, "final_metric": 0.9,
             "train_time_s": 10, "examples": 100, "examples_per_s": rate, "wire_bytes_per_example": wire}
            for s, t in enumerate(times)]


def write_seeds(path, all_rows):
    path.mkdir(parents=True)
    with open(path / "seeds.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(all_rows)
    return path / "seeds.csv"


NONE_ROWS = (rows("bsp", [10, 11, 12, 10, 11], 100, 1000)            # 1.0e6-1.2e6 B to target
             + rows("bsp+h8", [12, 13, 14, 12, 13], 100, 125)        # 8x fewer bytes per example
             + rows("bsp+h8+diloco", [10, 10, 10, 10, 10], 100, 125)
             + rows("asp+h8+diloco", [20, 21, 22, 20, 21], 100, 125)  # twice the examples of sync DiLoCo
             + rows("asp+h8+diloco+dn", [10, 10, 10, 10, 10], 100, 125)
             + rows("asp", [10, 11, 12, 10, 11], 100, 1000)
             + rows("asp+h8", [10, 11, 12, 10, "inf"], 150, 125))    # faster per example, one seed short


def test_local_update_claims_from_seeds(tmp_path):
    seeds = write_seeds(tmp_path / "w4-none", NONE_ROWS)
    stats = report.load_case(seeds)
    got = {c.claim.split(": ", 1)[1]: c for c in claims_local.local_update_verdicts(
        stats, claims_local.seed_rows(seeds), "4 workers", 8)}
    bytes_claim = got["local SGD and DiLoCo reach BSP's target with far fewer bytes"]
    assert bytes_claim.verdict == "confirmed"
    # 125 B/example x 100 examples/s x a median 13 s to target.
    assert "bsp+h8 162.50 kB [150.00 kB, 175.00 kB] vs bsp 1100.00 kB" in bytes_claim.evidence
    assert got["naive asynchronous local updates need more steps than synchronous ones (examples to target)"
               ].verdict == "confirmed"
    assert got["Delayed Nesterov closes that gap (examples to target tie synchronous DiLoCo's)"].verdict == "confirmed"
    dn = got["Delayed Nesterov does better than naive asynchronous DiLoCo (final accuracy; runs stop at the target)"]
    assert dn.verdict == "not confirmed" and "tied: ratio 1.00" in dn.evidence  # every row's final accuracy is 0.9
    assert got["GEO-SGD takes less time per epoch than ASP (s per 1,000 examples)"].verdict == "confirmed"
    assert got["GEO-SGD reaches ASP's quality (holds the target in as many seeds)"].verdict == "not confirmed"


def test_report_from_two_worker_counts(tmp_path):
    het = rows("bsp", [30, 31, 32, 30, 31], 100, 1000) + rows("bsp+b1", [12, 13, 14, 12, 13], 100, 1000)
    for w in (4, 16):
        write_seeds(tmp_path / f"w{w}-none", NONE_ROWS)
        write_seeds(tmp_path / f"w{w}-straggler", het)
        write_seeds(tmp_path / f"w{w}-lr-sync", rows("bsp", [10], 100, 1000) + [
            dict(rows("bsp", [20], 100, 1000)[0], lr=0.3, chosen_lr="False")])
    assert report.main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "**Every time in this report is simulated**" in text
    assert "## 4 workers" in text and "## 16 workers" in text
    assert ("| backup workers shorten BSP's time to target under a persistent straggler | confirmed | confirmed |"
            in text)
    assert "- backup workers shorten BSP's time to target under a persistent straggler: confirmed at every W." in text
    assert "sync grid 0.1,0.3: bsp 0.1 (an end of the grid)" in text
    assert (tmp_path / "scale.png").stat().st_size > 0 and (tmp_path / "verdicts.png").stat().st_size > 0


def test_delayed_nesterov_judged_on_final_accuracy_when_neither_async_variant_holds(tmp_path):
    naive = [dict(r, time_to_target_s="inf", final_metric=f) for r, f in
             zip(rows("asp+h8+diloco", [0] * 5, 100, 125), [0.70, 0.72, 0.75, 0.74, 0.73])]
    dn = [dict(r, time_to_target_s="inf", final_metric=f) for r, f in
          zip(rows("asp+h8+diloco+dn", [0] * 5, 100, 125), [0.88, 0.90, 0.91, 0.89, 0.90])]
    seeds = write_seeds(tmp_path / "w4-none", naive + dn)
    got = {c.claim.split(": ", 1)[1]: c.verdict for c in claims_local.local_update_verdicts(
        report.load_case(seeds), claims_local.seed_rows(seeds), "4 workers", 8)}
    assert got["Delayed Nesterov does better than naive asynchronous DiLoCo (final accuracy; runs stop at the "
               "target)"] == "confirmed"
    assert got["Delayed Nesterov closes that gap (examples to target tie synchronous DiLoCo's)"] == "not tested"


def test_the_sensitivity_sweep_says_which_verdicts_hold_and_where_one_flips(tmp_path):
    import json
    # Stated cluster (25 Gb/s): backup workers win under the straggler. At 1 Gb/s they do not.
    win = rows("bsp", [30, 31, 32, 30, 31], 100, 1000) + rows("bsp+b1", [12, 13, 14, 12, 13], 100, 1000)
    lose = rows("bsp", [30, 31, 32, 30, 31], 100, 1000) + rows("bsp+b1", [33, 34, 35, 33, 34], 100, 1000)
    write_seeds(tmp_path / "w4-straggler", win)
    sweep = tmp_path / "sensitivity"
    sweep.mkdir()
    (sweep / "knobs.json").write_text(json.dumps({"bandwidth": {
        "name": "link bandwidth", "unit": "Gb/s", "key": "sim.bandwidth_gbps", "stated": 25, "values": [1, 4, 100]}}))
    for value, case in ((1, lose), (4, win), (100, win)):
        write_seeds(sweep / f"bandwidth-{value}" / "w4-straggler", case)
    assert report.main([str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    claim = "W=4: backup workers shorten BSP's time to target under a persistent straggler"
    assert "## Sensitivity to the time model" in text
    assert (f"- {claim}: confirmed at the stated cluster; depends on link bandwidth: not confirmed at 1 Gb/s, "
            "boundary between 1 Gb/s and 4 Gb/s") in text
    assert (tmp_path / "sensitivity.png").read_bytes().startswith(b"\x89PNG")
