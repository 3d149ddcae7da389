"""`psgd bench convergence` and `psgd plot`: mode parsing and the report table
on hand-made runs (exact), plus one real smoke run of the CLI on a tiny config."""
from pathlib import Path
import pytest
from psgd.bench.convergence import mode_table, parse_modes, train_time_s
from psgd.bench.run_data import RunData, mode_label


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_parse_modes_covers_every_mode_and_the_staleness_aware_suffix():
    specs = parse_modes("allreduce, bsp,ssp:0,ssp:8,asp,asp+sa,ssp:2+sa")
    assert [(s.label, s.mode, s.staleness, s.staleness_aware) for s in specs] == [
        ("allreduce", "allreduce", 0, False), ("bsp", "bsp", 0, False), ("ssp:0", "ssp", 0, False),
        ("ssp:8", "ssp", 8, False), ("asp", "asp", 0, False), ("asp+sa", "asp", 0, True),
        ("ssp:2+sa", "ssp", 2, True)]
    assert specs[5].overrides == ["consistency.mode=asp", "consistency.staleness=0",
                                  "optimizer.staleness_aware=true"]
    assert specs[5].dir_name == "asp-sa" and specs[3].dir_name == "ssp8"


@pytest.mark.parametrize("text, fragment", [
    ("ssp", "ssp needs a bound"), ("asp:2", "other modes take none"), ("ssp:-1", "integer >= 0"),
    ("sync", "mode must be"), ("asp+fast", "only suffix"), ("allreduce+sa", "parameter-server mode"),
    ("asp,asp", "listed twice"), (" , ", "at least one mode")])
def test_parse_modes_rejects_bad_items_naming_them(text, fragment):
    with pytest.raises(ValueError, match="--modes") as err:
        parse_modes(text)
    assert fragment in str(err.value)


def _run(label, seed, ttt, acc, updates, last_step_t, st_mean=0.0, st_max=0):
    summary = {"seed": seed, "time_to_target_s": ttt, "final_test_accuracy": acc, "total_updates": updates,
               "staleness_mean": st_mean, "staleness_max": st_max}
    steps = [{"t": last_step_t / 2, "loss": 1.0}, {"t": last_step_t, "loss": 0.5}]
    return RunData(Path(f"/runs/{label}-{seed}"), label, summary, [], steps)


def test_mode_table_shows_medians_with_min_max_over_seeds():
    runs = [_run("bsp", 0, 3.0, 0.90, 100, 10.0), _run("bsp", 1, 5.0, 0.94, 200, 10.0),
            _run("bsp", 2, 4.0, 0.92, 300, 10.0),
            _run("asp", 0, 2.0, 0.91, 400, 8.0, 1.5, 6), _run("asp", 1, None, 0.85, 400, 8.0, 2.5, 9)]
    table = mode_table(runs, 0.9).splitlines()
    assert table[0].startswith("| mode | seeds | time to 0.9 (s) | reached |")
    assert table[2] == "| bsp | 3 | 4.00 [3.00–5.00] | 3/3 | 0.9200 [0.9000–0.9400] | 20 [10–30] | 0.00 [0.00–0.00] | 0 [0–0] |"
    # One seed did not reach the target: the median of (2.0, not reached) is not reached.
    assert table[3] == "| asp | 2 | not reached [2.00–n.r.] | 1/2 | 0.8800 [0.8500–0.9100] | 50 [50–50] | 2.00 [1.50–2.50] | 8 [6–9] |"
    assert train_time_s(runs[3]) == 8.0


def test_mode_label_names_runs_as_the_command_line_does():
    assert mode_label("ssp", 4, False) == "ssp:4"
    assert mode_label("asp", None, True) == "asp+sa"
    assert mode_label("allreduce", None, True) == "allreduce"
