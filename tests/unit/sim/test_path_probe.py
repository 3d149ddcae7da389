"""`sim.batched: auto` (psgd.sim.path_probe): the choice from stated timings (no timing is
asserted), the config key, and the choice written into a run's config.yaml and summary.json."""
import json

import pytest

from psgd.config import ConfigError, load_config
from psgd.orchestrate.launchers.sim import SimLauncher
from psgd.sim import path_probe
from psgd.sim.faults import check_faults
from psgd.sim.path_probe import BATCHED_MARGIN, PathProbe, choose_batched, probe_paths, resolve_batched

SETS = ["task.model=mlp", "task.dataset=digits", "task.batch_size=16", "cluster.servers=2", "cluster.workers=4",
        "consistency.mode=asp", "train.steps_per_worker=6", "eval.enabled=false", "sim.compute_ms=0.5",
        "cluster.launcher=sim"]


@pytest.mark.parametrize("serial_s, batched_s, fallback, batched", [
    (2e-3, 1e-3, None, True),         # batched faster: batched
    (1e-3, 2e-3, None, False),        # serial faster: serial
    (1e-3, 1e-3, None, False),        # a tie keeps the exact path
    (1e-3, 1e-3 * (1 - BATCHED_MARGIN), None, False),  # so does a near tie, up to the margin
    (1e-3, 1e-3 * (1 - 2 * BATCHED_MARGIN), None, True),
    (2e-3, 1e-3, "dropout", False),   # ruled out, whatever the timings
    (2e-3, None, "vmap failed", False),
])
def test_the_choice_from_stated_timings(serial_s, batched_s, fallback, batched):
    assert choose_batched(serial_s, batched_s, fallback) is batched
    probe = PathProbe(4, serial_s, batched_s, fallback, 0.5)
    assert probe.batched is batched
    assert probe.describe()["chosen"] == ("batched" if batched else "serial")


@pytest.fixture
def timings(monkeypatch):
    """The probe's two timed paths, stated: set `stated[:] = [serial round s, batched round s]`."""
    stated: list[float] = []
    calls = iter(range(2))
    monkeypatch.setattr(path_probe, "_best", lambda fn, rounds: stated[next(calls)])
    monkeypatch.setattr(path_probe, "initialize_functorch", lambda: 0.0)
    return stated


@pytest.mark.parametrize("serial_round, batched_round", [(0.04, 0.01), (0.01, 0.04)])
def test_auto_takes_the_path_the_stated_timings_favour(timings, serial_round, batched_round):
    timings[:] = [serial_round, batched_round]
    cfg, probe = resolve_batched(load_config(None, SETS + ["sim.batched=auto"]))
    assert probe.workers == 4
    assert probe.serial_s == pytest.approx(serial_round / 4) and probe.batched_s == pytest.approx(batched_round / 4)
    assert cfg.sim.batched is (batched_round < serial_round)


@pytest.mark.parametrize("value", [True, False])
def test_true_and_false_are_kept_and_probe_nothing(value):
    cfg = load_config(None, SETS + [f"sim.batched={str(value).lower()}"])
    assert resolve_batched(cfg) == (cfg, None)


def test_the_key_takes_auto_and_refuses_other_words_in_one_line():
    assert load_config(None, ["sim.batched=auto"]).sim.batched == "auto"
    with pytest.raises(ConfigError, match="sim.batched") as err:
        load_config(None, ["sim.batched=sometimes"])
    assert "\n" not in str(err.value)


def test_what_batching_cannot_run_is_chosen_serial_untimed():
    probe = probe_paths(load_config(None, SETS + ["sim.batched=auto", "local.steps=2"]))
    assert not probe.batched and probe.serial_s is None and "local updates" in probe.fallback
    cfg, probe = resolve_batched(load_config(None, SETS + ["sim.batched=auto", "consistency.mode=allreduce"]))
    assert cfg.sim.batched is False and probe is None  # all-reduce computes no gradients in the executor


def test_auto_runs_a_kill_storm_one_by_one_where_true_is_refused():
    storm = SETS + ["sim.faults.kill_every_s=0.002", "train.max_time_s=10", "supervision.backoff_s=0.0001"]
    check_faults(load_config(None, storm + ["sim.batched=auto"]))
    probe = probe_paths(load_config(None, storm + ["sim.batched=auto"]))
    assert not probe.batched and "kill_every_s" in probe.fallback


def test_a_run_writes_the_choice_into_config_yaml_and_summary(tmp_path, timings):
    timings[:] = [0.04, 0.01]
    result = SimLauncher(load_config(None, SETS + ["sim.batched=auto"]), tmp_path).run()
    assert result.code == 0, result.reason
    assert load_config(tmp_path / "config.yaml").sim.batched is True
    gradients = json.loads((tmp_path / "summary.json").read_text())["sim_gradients"]
    assert gradients["path_probe"]["chosen"] == "batched" and gradients["batched_steps"] > 0
    again = tmp_path / "again"
    again.mkdir()
    assert SimLauncher(load_config(tmp_path / "config.yaml"), again).run().code == 0  # the rerun probes nothing
    for name in ("metrics.jsonl", "model.pt"):
        assert (again / name).read_bytes() == (tmp_path / name).read_bytes(), name
    assert "path_probe" not in json.loads((again / "summary.json").read_text())["sim_gradients"]
