"""Sensitivity of verdicts to the time model, on constructed verdict grids."""
import pytest

from psgd.bench.sensitivity import Boundary, Knob, plot_sensitivity, sensitivity, sensitivity_table
from psgd.bench.verdict import ClaimVerdict

C, N, UNSURE = ClaimVerdict.CONFIRMED, ClaimVerdict.NOT_CONFIRMED, ClaimVerdict.INCONCLUSIVE
KNOBS = {"bandwidth": Knob("link bandwidth", "Gb/s", 25.0, "sim.bandwidth_gbps"),
         "variability": Knob("step-time variability", "CV", 0.1),
         "compute": Knob("compute per step", "ms", 20.0)}
STATED = {"SSP beats BSP under delays": C, "DC-ASGD beats ASP": UNSURE}


def sweeps_from(rule):
    """Verdicts at each swept value, computed by `rule(knob, value, claim)` (the stated value left out)."""
    values = {"bandwidth": [1.0, 4.0, 10.0, 100.0], "variability": [0.0, 0.05, 0.2, 0.4], "compute": [5.0, 80.0]}
    return {k: {v: {c: rule(k, v, c) for c in STATED} for v in vs} for k, vs in values.items()}


def test_a_verdict_that_holds_everywhere_reports_the_whole_swept_range():
    rows = sensitivity(STATED, sweeps_from(lambda k, v, c: STATED[c]), KNOBS)
    assert [r.claim for r in rows] == list(STATED) and all(r.holds for r in rows)
    bw = rows[0].ranges[0]
    assert (bw.low, bw.high, bw.swept) == (1.0, 100.0, (1.0, 4.0, 10.0, 25.0, 100.0))
    assert bw.text() == "holds for 1 Gb/s to 100 Gb/s"
    assert rows[0].text().startswith("confirmed across the sweep (link bandwidth holds for 1 Gb/s to 100 Gb/s;")


def test_a_flip_inside_the_sweep_is_reported_with_its_boundary():
    # Slow links make BSP's barrier cheap next to the transfer: the SSP win vanishes below 10 Gb/s.
    def rule(knob, value, claim):
        if claim.startswith("SSP") and knob == "bandwidth" and value < 10:
            return UNSURE
        if claim.startswith("SSP") and knob == "variability" and value == 0.0:
            return N   # lockstep without jitter: no straggler to absorb
        return STATED[claim]
    rows = sensitivity(STATED, sweeps_from(rule), KNOBS)
    ssp, dc = rows
    bw, var, comp = ssp.ranges
    assert (bw.low, bw.high) == (10.0, 100.0) and bw.below == Boundary(10.0, 4.0, "inconclusive") and bw.above is None
    assert bw.text() == "depends on link bandwidth: inconclusive at 4 Gb/s, boundary between 4 Gb/s and 10 Gb/s"
    assert (var.low, var.high) == (0.05, 0.4) and var.below == Boundary(0.05, 0.0, "not confirmed")
    assert comp.holds and not ssp.holds and dc.holds
    assert ssp.text() == ("confirmed at the stated cluster; " + bw.text() + "; " + var.text())


def test_the_range_stops_at_the_first_change_outwards_even_if_it_comes_back():
    sweeps = {"bandwidth": {1.0: {"x": C}, 4.0: {"x": UNSURE}, 10.0: {"x": C}, 100.0: {"x": C}}}
    (row,) = sensitivity({"x": C}, sweeps, KNOBS)
    r = row.ranges[0]
    assert (r.low, r.high) == (10.0, 100.0) and r.below == Boundary(10.0, 4.0, "inconclusive")


def test_the_table_and_the_plot(tmp_path):
    rows = sensitivity(STATED, sweeps_from(lambda k, v, c: UNSURE if (c.startswith("SSP") and v == 1.0) else STATED[c]),
                       KNOBS)
    table = sensitivity_table(rows).splitlines()
    assert table[0] == ("| claim | verdict at the stated cluster | link bandwidth (stated 25 Gb/s) | "
                        "step-time variability (stated 0.1 CV) | compute per step (stated 20 ms) |")
    assert table[2].startswith("| SSP beats BSP under delays | confirmed | depends on link bandwidth: inconclusive "
                               "at 1 Gb/s, boundary between 1 Gb/s and 4 Gb/s |")
    png = plot_sensitivity(STATED, sweeps_from(lambda k, v, c: STATED[c]), KNOBS, tmp_path / "sensitivity.png")
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000


def test_a_sweep_without_its_knob_is_refused():
    with pytest.raises(ValueError, match="no Knob for latency"):
        sensitivity(STATED, {"latency": {1.0: dict(STATED)}}, KNOBS)
