"""What the simulator does the way real runs do, or refuses: overlap is refused in one
line; the adaptive bound's changes are written as setting_change events, as real shards write them."""
import json
from pathlib import Path

import pytest

from psgd.cli import main
from psgd.config import ConfigError, load_config
from psgd.orchestrate.launchers.sim import SimLauncher
from psgd.runtime.event_names import FIELDS, Event

CONFIG = Path(__file__).parents[3] / "configs" / "quickstart.yaml"


@pytest.mark.parametrize("overlap", ["pipeline", "backward"])
def test_overlap_on_the_simulator_is_refused_in_one_line(tmp_path, capsys, overlap):
    with pytest.raises(ConfigError, match="workers.overlap") as err:
        load_config(CONFIG, ["cluster.launcher=sim", f"workers.overlap={overlap}"])
    assert "not modelled on the virtual cluster" in str(err.value)
    code = main(["launch", str(CONFIG), "--on", "sim", "--quiet", "--out", str(tmp_path / "run"),
                 "--set", f"workers.overlap={overlap}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "workers.overlap" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_the_adaptive_bound_writes_setting_change_events_on_the_simulator(tmp_path):
    # A straggler makes the fast workers wait: the shards' adaptive bound moves, and says so.
    cfg = load_config(None, ["task.model=mlp", "task.dataset=digits", "cluster.servers=2", "cluster.workers=4",
                             "consistency.mode=ssp", "consistency.staleness=auto", "consistency.staleness_max=4",
                             "workers.slowdown={3: 4.0}", "train.steps_per_worker=150", "eval.enabled=false",
                             "sim.compute_ms=2", "cluster.launcher=sim"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert SimLauncher(cfg, run_dir).run().code == 0
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    changes = [e for e in events if e["event"] == Event.SETTING_CHANGE]
    assert changes, "no setting_change event"
    assert {e["index"] for e in changes} == {0, 1} and {e["role"] for e in changes} == {"server"}
    for e in changes:
        assert FIELDS[Event.SETTING_CHANGE] <= set(e)  # the fields a real shard writes
        assert e["origin"] == "auto" and e["changes"]["staleness"] == e["setting"]["bound"] == e["bound"]
    # Both shards decide the same bounds at the same clocks (one rule, the same clocks).
    per_shard = [[(e["effective_clock"], e["changes"]["staleness"]) for e in changes if e["index"] == s] for s in (0, 1)]
    assert per_shard[0] == per_shard[1]
    steps = [e["t"] for e in events if e["event"] == Event.STEP]
    assert all(0 < e["t"] <= max(steps) for e in changes)  # in simulated seconds, during the run
