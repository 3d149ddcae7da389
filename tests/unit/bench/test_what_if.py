"""psgd.bench.what_if: the calibration check says which figure the calibrated simulation
missed, by how much, against the margin it states; a change must be a valid key=value."""
import pytest

from psgd.bench.what_if import REPRODUCE_MARGIN, Figures, Reproduction, what_if
from psgd.config import ConfigError


def test_figures_read_a_summary():
    f = Figures.of({"wall_time_s": 4.0, "total_updates": 100, "time_to_target_s": 2.5})
    assert (f.time_to_target_s, f.wall_time_s, f.updates_per_s) == (2.5, 4.0, 25.0)


def test_a_simulation_within_the_margin_reproduces_the_run():
    real = Figures(10.0, 20.0, 25.0)
    inside = Figures(10.0 * (1 + REPRODUCE_MARGIN * 0.9), 20.0, 25.0 * (1 - REPRODUCE_MARGIN * 0.9))
    assert Reproduction(real, inside, REPRODUCE_MARGIN).misses() == []


def test_each_missed_figure_is_named_with_its_error():
    real = Figures(10.0, 20.0, 25.0)
    r = Reproduction(real, Figures(14.0, 20.0, 25.0), REPRODUCE_MARGIN)
    assert r.misses() == ["time to target (s): real 10, simulated 14 (+40%)"]
    one_side = Reproduction(real, Figures(None, 20.0, 12.5), REPRODUCE_MARGIN).misses()
    assert one_side == ["updates/s: real 25, simulated 12.5 (-50%)",
                        "time to target (s): real 10, simulated not reached (reached on one side only)"]


def test_no_change_or_too_few_seeds_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="name at least one change"):
        what_if(tmp_path, [], tmp_path)
    with pytest.raises(ConfigError, match="at least 2 seeds"):
        what_if(tmp_path, ["consistency.backup_workers=1"], tmp_path, seeds=1)
